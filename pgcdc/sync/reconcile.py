"""A table reconciled by range instead of copied, where its Delta table holds rows the queue can
no longer bring up to date on its own: its consumer fell past the retention limit (the events it
missed are gone), the table was detached and attached again (changes in between were never
captured), or its Delta table was taken over from another writer (`pgcdc adopt`). Only rows
that differ are written; the rest of the Delta table stays as it is, files and history.

How: the queue is made to keep the table's events from now on (as before a copy), then, in
one REPEATABLE READ snapshot S of the reader, the table's rows are compared with its Delta
table's (pgcdc/diff/rows.py: hashes per key range, rows where they differ). The keys that
differ are queued as changes (diff/queue.py), and a state whose watermark is S's, as a copy
in S would have, is committed to the Delta table alone. The batches that follow read each
queued key's row again (written where it differs, deleted where PostgreSQL no longer has it),
and every change S does not show is an event above that watermark. So Delta ends equal to
PostgreSQL, exact under live writes. A kill before the commit leaves the old state: the next
run reconciles again (a key queued twice lands once); after it, the queued keys are the
next batch's. Work grows with the table's size only in the comparison's reading, and with
the rows that differ in its writing.

Where that cannot hold, the table is copied instead, the reason said (`recover`): a fan-in's
source, a Delta table of other columns, partitioning or key, none with rows, a run's role that
may not queue keys (a reader's: `pgcdc grant ROLE --reader`), keys of a type someone created,
keys Delta holds more than once, or so many rows differing that a copy is cheaper
(`ingest.recopy_fraction`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc import faults
from pgcdc.diff.queue import queue_differing, replayed, typed_keys
from pgcdc.diff.rows import Comparison, compare
from pgcdc.engines import Engine
from pgcdc.lake import copy_writes, tablelog, target
from pgcdc.source import events
from pgcdc.source.mirror import mark_committing, register_table
from pgcdc.sync import copies
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.pass_cut import PassCut, leave
from pgcdc.sync.plan import layout_changed
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Found:
    """What the comparison in snapshot S found, and the state a copy in S would have had."""

    comparison: Comparison
    state: ConsumerState


def recover(ctx: RunContext, w: TableWork, last_batch: int, engine: Engine | None, cut: PassCut | None,
            why: str) -> tuple[ConsumerState, PassCut | None]:
    """Reconcile the table by range (the module docstring), or copy it where that cannot hold;
    `why`: what asks for it. Returns the state the batches go on from and the cut the table goes
    on in (it leaves the pass's: the comparison reads in a snapshot of its own). (Six
    parameters: copy_table's.)"""
    refused = _reconcilable(ctx, w)
    if not isinstance(refused, str):
        cut = leave(cut, w.t, f"reconciled by range in a snapshot of its own ({why})", ctx.routine)
        ctx.say(f"{w.t.name}: {why}: reconciling its Delta table by range with PostgreSQL (rows compared in "
                "key ranges, only those that differ rewritten) ...", log=_log)
        done = _reconcile(ctx, w, last_batch, refused)
        if isinstance(done, ConsumerState):
            return done, cut
        refused = done
    ctx.say(f"{w.t.name}: {why}: copying the table ({refused}, so it is not reconciled by range)", log=_log)
    return copies.copy_table(ctx, w, last_batch, engine, cut, why)


def holds_rows(spark: "SparkSession", path: str) -> bool:
    """Whether the Delta table holds any row (its checksum's file count, else a read of one row)."""
    files = tablelog.read_state(spark, path, need_txns=False).num_files
    if files is not None:
        return files > 0
    return bool(spark.read.format("delta").load(path).limit(1).count())


def _reconcilable(ctx: RunContext, w: TableWork) -> list[str] | str:
    """The SQL turning the table's differing keys back into keys (diff/queue.typed_keys), or why it
    cannot be reconciled by range (so it is copied), as far as that is known before reading its
    rows."""
    t = w.t
    if t.into is not None:
        return "a fan-in's source is copied into its shard"
    log = tablelog.read_state(ctx.spark, w.path, need_txns=False)
    if log.num_files == 0:
        return "its Delta table holds no rows"
    have, source = log.schema(), ctx.target_schema(w.jdbc, t, w.columns)
    if (changed := target.schema_change(have, source)) is not None:
        return f"its Delta table's columns differ ({changed})"
    if (layout := layout_changed(log, t)) is not None:
        return layout
    keyed = sorted(f.name for f in have.fields if not f.nullable)
    if keyed and keyed != sorted(t.key_columns):
        return f"its Delta table is keyed by {', '.join(keyed)}, the table now by {', '.join(t.key_columns)}"
    if not w.primary.execute("select pg_catalog.has_table_privilege('pgcdc.commit_queue', 'insert')").fetchone()[0]:
        return "the run's role may not queue the keys that differ (an admin role's right: `pgcdc grant ROLE --admin`)"
    typed = typed_keys(w.primary, t)
    return f"the queue cannot take {typed}" if isinstance(typed, str) else typed


def _reconcile(ctx: RunContext, w: TableWork, last_batch: int, typed: list[str]) -> ConsumerState | str:
    """The comparison in a snapshot of its own (once the reader has reached the queue's
    registration), the differing keys queued (`typed`: _reconcilable's SQL for them) and the state
    committed: the state, or why the table is copied after all."""
    t, primary = w.t, w.primary
    registered = register_table(primary, ctx.settings.consumer, t.table_id, w.path)
    found = events.once_reached(w.reader, registered, ctx.settings.source.reader_role,
                                lambda: _compared(ctx, w, last_batch, registered))
    c = found.comparison
    if c.problem is not None or c.columns is not None:
        return f"its rows could not be compared: {c.problem or c.columns}"
    if c.duplicates:
        return f"its Delta table holds {c.duplicates} keys more than once"
    fraction = ctx.settings.ingest.recopy_fraction
    if c.differing and 0 < fraction and len(c.differing) >= fraction * max(c.postgres_rows, 1):
        return f"{len(c.differing)} of {c.postgres_rows} rows differ, >= {fraction:.0%}"
    queued = queue_differing(primary, t, c.differing, typed) if c.differing else 0
    faults.failpoint("before-reconcile-commit")
    mark_committing(primary, found.state, w.path)
    state = ctx.committed(primary, w.path, found.state, copy_writes.state_alone(ctx.spark, w.path, found.state),
                          copied=True)
    replayed(primary, w.reader)  # (the batches read the queued keys on the reader)
    w.report.reconciled = queued
    ctx.say(f"{t.name}: compared by range ({c.postgres_rows} rows in PostgreSQL, {c.delta_rows} in Delta): {queued} "
            "keys differ, queued to be read again; the other rows and their files stay", log=_log)
    return state


def _compared(ctx: RunContext, w: TableWork, last_batch: int, registered: int) -> _Found:
    """The comparison in one REPEATABLE READ snapshot S of the reader, and the state a copy in S
    would have had: S's txmin as watermark, the transactions at or above it that S shows as
    applied. Raises events.Behind while S has not reached the registration."""
    t, reader = w.t, w.reader
    with reader.transaction():
        reader.execute("set transaction isolation level repeatable read, read only")
        snap = events.take_snapshot(reader)
        if snap.txmin < registered:  # (a standby that has not replayed the registration yet)
            raise events.Behind(snap.txmin)
        applied = events.visible_at_or_above(reader, t.table_id, snap)
        comparison = compare(ctx.spark, reader, t, w.path)  # (in this transaction: its snapshot)
    state = ConsumerState(ctx.settings.consumer, t.name, t.table_id, w.identity, snap.txmin, batch=last_batch,
                          columns=ctx.fingerprint(t, w.columns), shard=t.fan_in_shard).next(snap.txmin, applied)
    return _Found(comparison, state)
