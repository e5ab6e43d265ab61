"""Bookkeeping around ingest runs: one run over the tables (each failing alone), which tables
a run syncs, what it records in PostgreSQL for `pgcdc status`, what it checks before trusting
a table's state, and how a failure reads."""

from __future__ import annotations

import logging
import re
import time
from contextlib import suppress
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from pgcdc import capture, consumers, events, target
from pgcdc.capture import AttachedTable
from pgcdc.db import connect
from pgcdc.errors import TableError, TargetError
from pgcdc.settings import Settings
from pgcdc.log import fields
from pgcdc.state import ConsumerState, committing_batch

if TYPE_CHECKING:
    from pgcdc.ingest import Job

_log = logging.getLogger(__name__)


@dataclass
class TableReport:
    """What one run did to one table."""

    table: str
    path: str
    batches: int = 0
    events: int = 0
    upserted: int = 0
    deleted: int = 0
    copied: int | None = None  # rows of a first sync
    watermark: int = 0
    pending_events: int = 0
    oldest_pending: datetime | None = None  # when the oldest event not applied yet was queued

    @property
    def wrote(self) -> bool:
        """Whether the run wrote to the table (a batch or a copy)."""
        return bool(self.batches) or self.copied is not None

    def fields(self) -> dict[str, object]:
        return {"record": "table"} | asdict(self)

    def line(self) -> str:
        what = f"copied {self.copied} rows, then " if self.copied is not None else ""
        return (f"{self.table}: {what}{self.events} events in {self.batches} batches, {self.upserted} upserted, "
                f"{self.deleted} deleted; watermark {self.watermark}; {self.pending_events} events pending "
                f"-> {self.path}")


def run_tables(job: "Job", skip: frozenset[str] = frozenset()) -> tuple[list[TableReport], dict[str, Exception]]:
    """Sync every table once, except `skip` (tables a follower holds back after failures):
    the reports, and the tables that failed with their errors. One table's failure never
    holds the others back; a lost connection or an interrupt ends the run."""
    began = time.monotonic()
    with job.source(job.settings.tables) as (primary, reader, tables, jdbc, identity):
        job.table_ids = {t.name: t.table_id for t in tables}
        if not tables:
            job.say("no tables attached; run `pgcdc attach SCHEMA.TABLE` first")
            return [], {}
        with reader.transaction():
            start = events.take_snapshot(reader)
        record_run(primary, job.settings.consumer, started=True)
        reports: list[TableReport] = []
        failed: dict[str, Exception] = {}
        try:
            for t in tables:
                if job.stopping():
                    break
                if t.name in skip:
                    continue
                try:
                    reports.append(job.sync_table(primary, reader, jdbc, identity, t))
                except Exception as exc:  # one table's problem never holds the others back
                    if primary.broken or reader.broken or job.interrupted():
                        raise  # (the connection itself, or a stop at once: no other table goes on)
                    job.say(f"{t.name}: FAILED: {first_line(exc)}", logging.ERROR, record="table_failed",
                             table=t.name, error=first_line(exc))
                    failed[t.name] = exc
            job.compactor.wait()  # (before the lock goes: the next run may write the table)
            for action, part in capture.maintain(primary):
                job.routine(f"queue: {action} {part}")
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt):  # (a stop at once does not wait for it)
                with suppress(Exception):
                    job.compactor.wait()
            with suppress(psycopg.Error):  # (the connection may be what failed)
                record_run(primary, job.settings.consumer, error=first_line(exc))
            raise
        held = [t.name for t in tables if t.name in skip]
        if failed or held:
            summary = "; ".join([f"{name}: {first_line(exc)}" for name, exc in failed.items()]
                                + [f"{name}: held back after failures" for name in held])
            record_run(primary, job.settings.consumer,
                       error=f"{len(failed) + len(held)} of {len(tables)} table(s) failed: {summary}")
        else:  # (a run stopped part-way leaves the txmin all tables reached before)
            record_run(primary, job.settings.consumer, start_txmin=None if job.stopping() else start.txmin)
    seconds = round(time.monotonic() - began, 3)
    events_, batches = sum(r.events for r in reports), sum(r.batches for r in reports)
    _log.log(logging.INFO if any(r.wrote for r in reports) or failed or not job.following else logging.DEBUG,
             "run of consumer %s: %d table(s) synced, %d failed; %d events in %d batches (%.2f s)",
             job.settings.consumer, len(reports), len(failed), events_, batches, seconds,
             extra=fields(record="run", consumer=job.settings.consumer, tables=len(reports), failed=sorted(failed),
                          batches=batches, events=events_, upserted=sum(r.upserted for r in reports),
                          deleted=sum(r.deleted for r in reports), seconds=seconds))
    return reports, failed


def select_tables(conn: psycopg.Connection, names: list[str]) -> list[AttachedTable]:
    """The attached tables to sync: the configured ones (all must be attached), else all."""
    attached = capture.list_attached(conn)
    if not names:
        return attached
    by_name = {t.name: t for t in attached}
    chosen = []
    for name in names:
        canonical = capture.resolve_table(conn, name)
        if canonical not in by_name:
            raise TableError(f"table {canonical} is listed in `tables` but not attached; run `pgcdc attach {canonical}`")
        chosen.append(by_name[canonical])
    return chosen


def check_state(primary: psycopg.Connection, state: ConsumerState, identity: str, t: AttachedTable,
                path: str) -> None:
    """Refuse a state that does not belong to this database as it is now (see docs/operations.md)."""
    # states written before identities included the database hold the system identifier alone
    current = identity if "/" in state.system_id else identity.split("/")[0]
    if state.system_id != current:
        raise TargetError(f"{path} was synced from another database (identity {state.system_id}, now "
                          f"{current}): after a restore txids restart, so its watermark means nothing here: "
                          f"run `pgcdc reset-watermark` (or `pgcdc resync {t.name}`)")
    regressed = ("it was restored from an earlier backup (or failed over to a standby that was behind), and "
                 "changes Delta holds may be gone from it; run `pgcdc reset-watermark` to copy the tables again "
                 "from the database as it is now")
    # the next txid the primary hands out: a watermark above it means the database went back in time
    next_txid = int(primary.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0])
    if state.watermark > next_txid:
        raise TargetError(f"{path} holds changes up to txid {state.watermark}, but the database is only at txid "
                          f"{next_txid}: {regressed}")
    if state.table_id != t.table_id:
        raise TargetError(f"{t.name} was detached and attached again (or attached again with another key or "
                          f"predicate) since {path} was last synced; changes in between were not captured (or "
                          f"were queued by the old options): run `pgcdc resync {t.name}`")
    known, committing = committing_batch(primary, state.consumer, t.table_id)
    if not known:
        raise TargetError(f"{path} holds batch {state.batch} of consumer {state.consumer}, but the database has "
                          f"no record of the consumer's sync of {t.name}: the consumer was dropped (`pgcdc "
                          f"consumers drop`), or {regressed.replace('; run', '. Either way, run', 1)}")
    if committing is not None and committing < state.batch:
        raise TargetError(f"{path} holds batch {state.batch} of consumer {state.consumer}, which the database "
                          f"has no record of: {regressed}")


def pending(reader: psycopg.Connection, state: ConsumerState) -> tuple[int, datetime | None]:
    """Events of the table not applied yet (above the watermark, outside the out-of-order set),
    and when the oldest of them was queued."""
    rows = reader.execute("select q.txid::text::bigint, count(*), min(q.at) from pgcdc.commit_queue q "
                          "where q.table_id = %s and q.txid >= %s::text::xid8 group by 1",
                          (state.table_id, str(state.watermark))).fetchall()
    left = [(n, at) for txid, n, at in rows if txid not in state.out_of_order]
    return sum(n for n, _ in left), min((at for _, at in left), default=None)


def record_run(primary: psycopg.Connection, consumer: str, *, started: bool = False, error: str | None = None,
               start_txmin: int | None = None) -> None:
    """Record in PostgreSQL that a run of the consumer started, failed (`error`) or succeeded
    (having started at `start_txmin`), for `pgcdc status`."""
    if started:
        primary.execute("insert into pgcdc.consumer_run (consumer, started_at) values (%s, now()) "
                        "on conflict (consumer) do update set started_at = now()", (consumer,))
        return
    primary.execute("update pgcdc.consumer_run set finished_at = now(), ok = %s, error = %s, "
                    "start_txmin = coalesce(%s::text::xid8, start_txmin) where consumer = %s",
                    (error is None, error, None if start_txmin is None else str(start_txmin), consumer))


def first_line(exc: BaseException) -> str:
    """What `pgcdc status` shows of a failed run: the error's first line (for a JVM error, the
    JVM exception's own message, not Py4J's "An error occurred while calling ..."), its type if empty."""
    java = getattr(exc, "java_exception", None)
    text = str(exc)
    if java is not None:
        with suppress(Exception):
            text = str(java.toString())
        # PostgreSQL's own error (a value refused by pgcdc._unfit, ...) deep inside Spark's task failure
        source = re.search(r"PSQLException: ERROR: (.*)", str(exc))
        if source is not None:
            return f"PostgreSQL: {source.group(1).strip()[:500]}"
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return f"PostgreSQL: {exc.diag.message_primary[:500]}"
    lines = text.strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def preflight(settings: Settings, tables: list[str], lock: bool = True) -> None:
    """What can be checked without Spark, before its 10-30 s start: the source answers, pgcdc is
    installed at the right version, the tables to sync are attached, no other run holds the
    consumer (`lock`; BusyError within seconds; the run takes the lock again once Spark is up),
    a local target is writable."""
    with connect(settings.source.dsn) as conn:
        select_tables(conn, tables)
        if lock:
            consumers.lock(conn, settings.consumer)  # (released with the connection)
    target.check_target_root(settings.target.root)
