"""The loop over a consumer's tables, and the entry points that run it: one run over the
tables (each failing alone, `run_tables`), a resync of some of them, the checks before Spark
starts. What one table needs is decided in `plan` and done by `ingest.Job`; this module is
the only one that goes over the tables, and nothing it calls calls back into it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

import psycopg

from pgcdc.errors import StoppedError
from pgcdc.lake.paths import check_target_root
from pgcdc.log import fields
from pgcdc.settings import Settings
from pgcdc.source import capture, consumers, events, schemas
from pgcdc.source.selection import canonical, select_tables
from pgcdc.source.capture import AttachedTable
from pgcdc.source.consumers import record_run
from pgcdc.source.db import connect
from pgcdc.spark.session import get_session
from pgcdc.sync.idle import pass_idle
from pgcdc.sync.ingest import Job
from pgcdc.sync.report import RACED, TableReport, first_line, raced
from pgcdc.sync.signals import Stopper

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)
LEASE_WAIT = 120.0  # seconds a resync waits for another worker to finish a table


def run(settings: Settings, spark: "SparkSession | None" = None,
        say: Callable[[str], None] | None = None) -> list[TableReport]:
    """Run the ingest job once (see `_once`)."""
    return _once(settings, spark, say, settings.tables, "the run", run_job)


def resync(settings: Settings, tables: list[str], spark: "SparkSession | None" = None,
           say: Callable[[str], None] | None = None, restored: bool = False) -> list[TableReport]:
    """Copy tables again from scratch into their Delta tables (see `resync_tables`, `_once`)."""
    return _once(settings, spark, say, tables, "the resync", lambda job: resync_tables(job, tables, restored),
                 restored)


def _once(settings: Settings, spark: "SparkSession | None", say: Callable[[str], None] | None, tables: list[str],
          what: str, work: Callable[[Job], list[TableReport]], restored: bool = False) -> list[TableReport]:
    """A one-shot `work` in a local Spark session unless given one. A first SIGTERM/SIGINT (a
    scheduler's timeout) stops it after the batch in flight (StoppedError), a second at once."""
    if spark is None:
        preflight(settings, tables, restored=restored)
    job = Job(settings, spark or get_session(settings.spark, target_root=settings.target.root), say)
    with Stopper().installed() as stop:
        job.stopping, job.interrupted = stop, lambda: stop.at_once
        reports = work(job)
    if stop():
        raise StoppedError(f"{what} stopped on {stop.signal_name} after the batch in flight ({len(reports)} table(s) "
                           "done); what it committed stays, and the next run goes on from there")
    return reports


def run_job(job: Job) -> list[TableReport]:
    """Sync every table once; raise the first table's failure after trying them all."""
    reports, failed = run_tables(job)
    if failed:
        raise next(iter(failed.values()))  # (every failed table was named in the log and is in `pgcdc status`)
    return reports


def resync_tables(job: Job, names: list[str], restored: bool = False) -> list[TableReport]:
    """Copy the given tables again from scratch (after a detach/attach, a restore or a schema
    change); `restored`: after a restore, which first clears a queue restored from another database."""
    consumer = job.settings.consumer
    with job.source(names, restored) as (primary, reader, tables, jdbc, identity):
        reports = []
        for t in tables:
            if job.stopping():
                break
            if not restored:  # (a restore's resync holds the whole consumer)
                consumers.lease_waiting(primary, consumer, t.table_id, t.name, LEASE_WAIT)
            try:
                reports.append(job.resync_table(primary, reader, jdbc, identity, t))
            finally:
                if not restored and not primary.broken:
                    consumers.unlease(primary, consumer, [t.table_id])
        return reports


def run_tables(job: "Job", skip: frozenset[str] = frozenset()) -> tuple[list[TableReport], dict[str, Exception]]:
    """Sync every table once, except `skip` (tables a follower holds back after failures):
    the reports, and the tables that failed with their errors. One table's failure never
    holds the others back; a lost connection or an interrupt ends the run."""
    began = time.monotonic()
    consumer = job.settings.consumer
    with job.source(job.settings.tables) as (primary, reader, tables, jdbc, identity):
        job.table_ids = {t.name: t.table_id for t in tables}
        if not tables:
            job.say("no tables attached; run `pgcdc attach SCHEMA.TABLE` first")
            return [], {}
        with reader.transaction():
            start = events.take_snapshot(reader)
        record_run(primary, job.settings.consumer, started=canonical(primary, job.settings.tables))
        for line in schemas.uncaptured_problems(primary):
            job.say(line, logging.WARNING)
        reports: list[TableReport] = []
        failed: dict[str, Exception] = {}
        elsewhere: list[str] = []  # tables another worker of the consumer is applying
        try:
            live = [t for t in tables if t.name not in skip]
            passed, oldest = _idle(job, primary, reader, identity, live)
            reports.extend(passed.values())
            leased: list[int] = []
            # the table whose oldest pending change is oldest first (one never looked at before all)
            for t in sorted((t for t in live if t.name not in passed), key=lambda t: oldest.get(t.table_id, 0)):
                if job.stopping():
                    break
                if not consumers.lease(primary, consumer, [t.table_id]):
                    elsewhere.append(t.name)
                    continue
                leased.append(t.table_id)
                try:
                    reports.append(job.sync_table(primary, reader, jdbc, identity, t))
                except Exception as exc:  # one table's problem never holds the others back
                    if primary.broken or reader.broken or job.interrupted():
                        raise  # (the connection itself, or a stop at once: no other table goes on)
                    job.say(f"{t.name}: FAILED: {first_line(exc)}{RACED if raced(exc) else ''}", logging.ERROR,
                            record="table_failed", table=t.name, error=first_line(exc))
                    failed[t.name] = exc
            job.compactor.wait()  # (before the leases go: the next run may write the table)
            consumers.unlease(primary, consumer, leased)
            if elsewhere:
                job.routine(f"{len(elsewhere)} table(s) left to the consumer's other workers, which are applying "
                            f"them: {', '.join(elsewhere)}")
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
        tried = [r.table for r in reports] + list(failed)
        if failed or held:
            summary = "; ".join([f"{name}: {first_line(exc)}" for name, exc in failed.items()]
                                + [f"{name}: held back after failures" for name in held])
            record_run(primary, consumer, tried=tried,
                       error=f"{len(failed) + len(held)} of {len(tables)} table(s) failed: {summary}",
                       failed={name: first_line(exc) for name, exc in failed.items()}
                       | {name: "held back after failures" for name in held})
        else:  # (a run stopped part-way, or sharing tables with other workers, leaves the txmin all tables reached)
            record_run(primary, consumer, tried=tried,
                       start_txmin=None if job.stopping() or elsewhere else start.txmin)
    seconds = round(time.monotonic() - began, 3)
    events_, batches = sum(r.events for r in reports), sum(r.batches for r in reports)
    _log.log(logging.INFO if any(r.wrote for r in reports) or failed or not job.following else logging.DEBUG,
             "run of consumer %s: %d table(s) synced, %d failed; %d events in %d batches (%.2f s)",
             job.settings.consumer, len(reports), len(failed), events_, batches, seconds,
             extra=fields(record="run", consumer=job.settings.consumer, tables=len(reports), failed=sorted(failed),
                          batches=batches, events=events_, upserted=sum(r.upserted for r in reports),
                          deleted=sum(r.deleted for r in reports), seconds=seconds))
    return reports, failed


def _idle(job: Job, primary: psycopg.Connection, reader: psycopg.Connection, identity: str,
          tables: list[AttachedTable]) -> tuple[dict[str, TableReport], dict[int, int]]:
    """The idle tables a pass leaves alone, of those no other worker holds, and the oldest
    pending txid of the others it looked at (sync/idle.py); none if looking fails (each table's
    full path then meets the problem on its own), unless a connection broke."""
    consumer = job.settings.consumer
    got = consumers.lease(primary, consumer, [t.table_id for t in tables])
    try:
        return pass_idle(job, primary, reader, identity, [t for t in tables if t.table_id in got])
    except Exception as exc:
        if primary.broken or reader.broken or job.interrupted():
            raise
        _log.debug("looking for idle tables failed (%s): every table takes the full path", first_line(exc))
        return {}, {}
    finally:
        if not primary.broken:
            consumers.unlease(primary, consumer, sorted(got))


def preflight(settings: Settings, tables: list[str], lock: bool = True, restored: bool = False) -> None:
    """What can be checked without Spark, before its 10-30 s start: the source answers, pgcdc is
    installed at the right version, the tables to sync are attached, no other run holds the
    consumer whole (`lock`; a worker may join it, or the whole of it if `restored`; BusyError
    within seconds; the run takes it again once Spark is up),
    a local target is writable."""
    with connect(settings.source.dsn) as conn:
        select_tables(conn, tables)
        if lock:  # (released with the connection)
            consumers.lock(conn, settings.consumer) if restored else consumers.join(conn, settings.consumer)
    check_target_root(settings.target.root)
