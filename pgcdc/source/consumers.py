"""Consumers as the source database knows them: registry, run lock, listing, dropping, and the
retention limit past which a lagging consumer's tables are copied again (see docs/operations.md).

A consumer is a name (settings `consumer`). Its per-table state lives with its Delta tables;
PostgreSQL keeps a mirror (pgcdc.consumer_state) that queue retention reads, so a consumer that
is gone would pin the queue until it is dropped or falls past the retention limit.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from pgcdc.errors import BusyError, ConfigError, TableError

LOCK_TRIES = 20  # x 0.25 s: pgcdc.maintain() holds a consumer's lock for a moment while it marks it
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this process, as status names a worker


@dataclass(frozen=True)
class ConsumerInfo:
    """One consumer, as `pgcdc consumers` lists it."""

    name: str
    tables: int
    min_watermark: int | None
    pending_events: int
    oldest_pending: datetime | None
    last_sync: datetime | None
    resync_needed: list[str]
    running: bool


def lock(conn: psycopg.Connection, name: str) -> None:
    """Hold the consumer's lease for the life of the connection (autocommit), or fail: runs of one
    consumer never overlap. A lease is a row of pgcdc.consumer naming this backend and a random
    advisory key it holds (sql/functions/consumer_lock.sql): no role outside pgcdc's can take or
    hold it, and two names never share one."""
    for _ in range(LOCK_TRIES):
        if conn.execute("select pgcdc.consumer_lock(%s)", (name,)).fetchone()[0]:
            return
        time.sleep(0.25)
    holder = conn.execute("select pgcdc.consumer_holder(%s)", (name,)).fetchone()[0] or "a backend that just ended"
    raise BusyError(f"another pgcdc ingest for consumer {name} is running ({holder}); "
                    "wait for it to finish (runs of one consumer never overlap)")


def join(conn: psycopg.Connection, name: str) -> None:
    """Join the consumer as one of its workers for the life of the connection (autocommit), or
    fail while a run holds its whole lease (`lock`: a restore's reset-watermark). Workers share
    the consumer's tables through per-table leases (`lease`; sql/functions/worker_lock.sql)."""
    for _ in range(LOCK_TRIES):
        if conn.execute("select pgcdc.worker_lock(%s, %s)", (name, WORKER)).fetchone()[0]:
            return
        time.sleep(0.25)
    holder = conn.execute("select pgcdc.consumer_holder(%s)", (name,)).fetchone()[0] or "a backend that just ended"
    raise BusyError(f"another pgcdc run holds consumer {name} whole ({holder}): a reset-watermark; wait for it "
                    "to finish and run again")


def lease(conn: psycopg.Connection, name: str, table_ids: list[int]) -> set[int]:
    """Lease the tables to this session's worker of the consumer (`join` first): the ids it
    holds now; the others are another live worker's."""
    if not table_ids:
        return set()
    return {r[0] for r in conn.execute("select pgcdc.table_lock(%s, %s::int[])", (name, table_ids))}


def lease_waiting(conn: psycopg.Connection, name: str, table_id: int, table: str, wait: float) -> None:
    """Lease one table, waiting up to `wait` seconds while another worker applies it (BusyError
    naming that worker after)."""
    deadline = time.monotonic() + wait
    while not lease(conn, name, [table_id]):
        if time.monotonic() > deadline:
            holder = holders(conn, name).get(table_id, "a worker that just ended")
            raise BusyError(f"{table}: worker {holder} of consumer {name} is applying it; run again once it is done")
        time.sleep(0.25)


def unlease(conn: psycopg.Connection, name: str, table_ids: list[int]) -> None:
    """End this session's leases of the tables."""
    if table_ids:
        conn.execute("select pgcdc.table_unlock(%s, %s::int[])", (name, table_ids))


def holders(conn: psycopg.Connection, name: str) -> dict[int, str]:
    """The consumer's tables a live worker holds now, by table id: "worker (pid N)"."""
    return dict(conn.execute(
        "select l.table_id, format('%%s (pid %%s)', w.worker, w.pid) from pgcdc.table_lease l "
        "join pgcdc.consumer_worker w on w.consumer = l.consumer and w.pid = l.pid "
        "where l.consumer = %s and pgcdc._lock_held(w.lock_key, w.pid)", (name,)).fetchall())


def release(conn: psycopg.Connection, name: str) -> None:
    """End this session's lease and worker before the connection ends (a follower keeps its
    connections between runs, and is not running in between): its advisory keys are the only
    ones a pgcdc session holds."""
    conn.execute("select pgcdc.worker_unlock(%s)", (name,))
    conn.execute("select pg_catalog.pg_advisory_unlock_all()")


def is_running(conn: psycopg.Connection, name: str) -> bool:
    """Whether an ingest of the consumer holds its lease now (from another session)."""
    return bool(conn.execute("select pgcdc.consumer_holder(%s) is not null and exists (select 1 from pgcdc.consumer "
                             "where name = %s and lock_pid <> pg_backend_pid())", (name, name)).fetchone()[0])


def list_consumers(conn: psycopg.Connection) -> list[ConsumerInfo]:
    """Every registered consumer with its lag: the events of its tables it has not applied
    (above each table's watermark; its out-of-order set is not subtracted) and the oldest."""
    rows = conn.execute(
        "select c.name, count(s.table_id), min(s.watermark)::text::bigint, coalesce(sum(p.events), 0), "
        "  min(p.oldest), max(s.updated_at), "
        "  coalesce(array_agg(format('%I.%I', n.nspname, r.relname)) filter (where s.resync_reason is not null), "
        "           '{}') "
        "from pgcdc.consumer c left join (pgcdc.consumer_state s join pgcdc.attached a using (table_id) "
        "  join pg_class r on r.oid = a.relid join pg_namespace n on n.oid = r.relnamespace) on s.consumer = c.name "
        "left join lateral (select count(*) as events, min(q.at) as oldest from pgcdc.commit_queue q "
        "                    where q.table_id = s.table_id and q.txid >= s.watermark) p on true "
        "group by c.name order by c.name").fetchall()
    return [ConsumerInfo(name, tables, low, int(events), oldest, last, sorted(marked), is_running(conn, name))
            for name, tables, low, events, oldest, last, marked in rows]


def drop(conn: psycopg.Connection, name: str) -> int:
    """Forget a consumer for good: its mirrored states and run record go, so it no longer pins
    the queue. Its Delta tables are left as they are. Returns how many table states went."""
    with conn.transaction():
        row = conn.execute("select consumer_id from pgcdc.consumer where name = %s for update", (name,)).fetchone()
        if row is None:
            known = [r[0] for r in conn.execute("select name from pgcdc.consumer order by 1")]
            raise TableError(f"no consumer named {name} in database {conn.info.dbname} (consumers: "
                             f"{', '.join(known) or 'none'}); `pgcdc consumers` lists them")
        if is_running(conn, name):
            raise BusyError(f"consumer {name} is running an ingest now; stop it (or wait) and drop it again")
        states = conn.execute("delete from pgcdc.consumer_state where consumer = %s", (name,)).rowcount
        conn.execute("delete from pgcdc.consumer_run where consumer = %s", (name,))
        conn.execute("delete from pgcdc.consumer where name = %s", (name,))
    return states


def retention(conn: psycopg.Connection) -> tuple[str | None, str | None]:
    """(max age, max size) of the unapplied queue a consumer may leave behind; None: no limit."""
    values: dict[str, str] = dict(conn.execute("select key, value from pgcdc.meta "
                               "where key in ('retention_max_age', 'retention_max_bytes')").fetchall())
    return values.get("retention_max_age"), values.get("retention_max_bytes")


def set_retention(conn: psycopg.Connection, max_age: str | None = None, max_size: str | None = None) -> None:
    """Change the retention limit; "none" removes a limit. Values are checked by PostgreSQL
    (an interval such as '7 days', a size such as '20 GB')."""
    with conn.transaction():
        for key, value, cast, example in (("retention_max_age", max_age, "interval", "'7 days'"),
                                          ("retention_max_bytes", max_size, "size", "'20 GB'")):
            if value is None:
                continue
            if value.strip().lower() == "none":
                conn.execute("delete from pgcdc.meta where key = %s", (key,))
                continue
            check = "select %s::interval" if cast == "interval" else "select pg_size_bytes(%s)"
            try:
                with conn.transaction():
                    conn.execute(check, (value,))
            except psycopg.Error:
                raise ConfigError(f"{value!r} is not a valid {cast} for {key}; use e.g. {example} or 'none'") from None
            conn.execute("insert into pgcdc.meta values (%s, %s) on conflict (key) do update set value = excluded.value",
                         (key, value))


def record_run(primary: psycopg.Connection, consumer: str, *, started: list[str] | None = None,
               error: str | None = None, failed: dict[str, str] | None = None, tried: list[str] | None = None,
               start_txmin: int | None = None) -> None:
    """Record in PostgreSQL that a run of the consumer started (with the `tables` entries it
    syncs, canonical), failed (`error`; `failed`: the tables it failed on, with their errors)
    or succeeded (having started at `start_txmin`), for `pgcdc status`. A table's error stays
    until a run tries it again (`tried`: another worker may have failed on one this run left).
    (Keyword-only options, each one thing the record says: a call passes the one or two it knows.)"""
    if started is not None:
        primary.execute("update pgcdc.consumer set tables = %s where name = %s", (started, consumer))
        primary.execute("insert into pgcdc.consumer_run (consumer, started_at) values (%s, now()) "
                        "on conflict (consumer) do update set started_at = now()", (consumer,))
        return
    primary.execute("update pgcdc.consumer_run set finished_at = now(), ok = %s, error = %s, "
                    "table_errors = (coalesce(table_errors, '{}') - %s::text[]) || %s, "
                    "start_txmin = coalesce(%s::text::xid8, start_txmin) where consumer = %s",
                    (error is None, error, tried or [], Jsonb(failed or {}),
                     None if start_txmin is None else str(start_txmin), consumer))
