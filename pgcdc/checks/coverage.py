"""Where each consumer stands on each table it syncs or should sync (`pgcdc status`).

A consumer's run records its `tables` entries (pgcdc.source.selection) in pgcdc.consumer, so
this knows, without the consumer's settings, which attached tables it should sync: a table
it takes in but never synced is named, not hidden behind another consumer's progress.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgcdc.source import capture, consumers, selection
from pgcdc.sync.progress import eta_seconds, reached

# a table's state for one consumer, as `pgcdc status` shows it
SYNCED, BEHIND, NEVER, FAILED, COPYING, LEFT_OUT = "synced", "behind", "never synced", "failed", "copying", "left out"


@dataclass(frozen=True)
class TableState:
    """One (consumer, table): its state and what backs it."""

    consumer: str
    table: str
    state: str
    pending_events: int = 0
    oldest_pending: datetime | None = None
    watermark: int | None = None
    batch: int | None = None
    last_sync: datetime | None = None
    delta_table: str | None = None
    error: str | None = None
    worker: str | None = None  # the worker applying it now (a lease of its, sql/functions/worker_lock.sql)
    copy: dict[str, Any] | None = None  # a copy in chunks under way: copy_progress, with its rate and time left


def _states(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    """Every mirrored (consumer, table) state with the events still pending above its watermark."""
    return conn.execute(
        "select s.consumer, s.table_id, format('%I.%I', n.nspname, c.relname), s.watermark::text::bigint, s.batch, "
        "  s.updated_at, s.target, p.events, p.oldest, s.copy_progress "
        "from pgcdc.consumer_state s join pgcdc.attached a using (table_id) join pg_class c on c.oid = a.relid "
        "join pg_namespace n on n.oid = c.relnamespace "
        "left join lateral (select count(*) as events, min(q.at) as oldest from pgcdc.commit_queue q "
        "                    where q.table_id = s.table_id and q.txid >= s.watermark) p on true "
        "order by 1, 3").fetchall()


def table_states(conn: psycopg.Connection) -> list[TableState]:
    """Per consumer, each table it has a state for or its recorded `tables` take in, by name."""
    registered = conn.execute(
        "select c.name, c.tables, coalesce(r.table_errors, '{}') from pgcdc.consumer c "
        "left join pgcdc.consumer_run r on r.consumer = c.name order by 1").fetchall()
    known = {(row[0], row[1]): row for row in _states(conn)}
    attached, names = capture.list_attached(conn), selection.stored_names(conn)  # (once for every consumer)
    out: list[TableState] = []
    for name, entries, errors in registered:
        running = consumers.is_running(conn, name)
        held = consumers.holders(conn, name)
        wanted = {t.table_id: t.name for t in selection.taken(entries, attached, names)} if entries is not None else {}
        ids = sorted({tid for (c, tid) in known if c == name} | set(wanted),
                     key=lambda tid: known[(name, tid)][2] if (name, tid) in known else wanted[tid])
        for tid in ids:
            row = known.get((name, tid))
            if row is None:
                out.append(TableState(name, wanted[tid], COPYING if running else NEVER, worker=held.get(tid)))
                continue
            _, _, table, watermark, batch, at, target, events, oldest, progress = row
            state = (COPYING if running else NEVER) if batch == 0 else FAILED if table in errors \
                else LEFT_OUT if entries is not None and tid not in wanted else COPYING if progress \
                else BEHIND if events else SYNCED
            out.append(TableState(name, table, state, int(events), oldest, watermark, batch, at, target,
                                  errors.get(table), held.get(tid), _copy(progress)))
    return out


def _copy(progress: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy's committed progress with its average rate since it began and the time left at it."""
    if not progress:
        return None
    rows, total = int(progress.get("rows", 0)), int(progress.get("total", 0))
    seconds = max(0.0, time.time() - float(progress.get("started", 0.0)))
    rate = rows / seconds if seconds > 0 else 0.0
    eta = eta_seconds(rows, total, rate)
    return {"chunks": int(progress.get("chunks", 0)), "rows": rows, "total": total,
            "fraction": round(min(1.0, rows / total), 4) if total else None, "rows_per_second": round(rate),
            "eta_seconds": None if eta is None else round(eta)}


def problems(states: list[TableState], recorded: dict[str, list[str] | None],
             running: set[str] | None = None) -> list[str]:
    """The tables a consumer should sync and never did, and copies under way that no run goes on
    with (`running`: the consumers running now; the other states are named elsewhere: a failed
    run, a table left out, changes pending too long)."""
    out = []
    for s in states:
        if s.copy is not None and running is not None and s.consumer not in running:
            out.append(f"consumer {s.consumer}'s copy of {s.table} stopped at {reached(s.copy['rows'], s.copy['total'])} "
                       f"(chunk {s.copy['chunks']}): "
                       f"run `pgcdc ingest` for consumer {s.consumer} to resume it")
        if s.state == NEVER:
            entries = recorded.get(s.consumer)
            why = f"its `tables` ({', '.join(entries)}) take it in" if entries else "it syncs every attached table"
            out.append(f"consumer {s.consumer} has never synced {s.table} ({why}); run `pgcdc ingest` "
                       f"for consumer {s.consumer}")
    return out


def recorded_tables(conn: psycopg.Connection) -> dict[str, list[str] | None]:
    """Each consumer's recorded `tables` entries (None: no run recorded them yet)."""
    return dict(conn.execute("select name, tables from pgcdc.consumer").fetchall())
