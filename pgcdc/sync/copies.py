"""Copying a table whole (first sync, resync, a copy a run decides on: sync/plan.py) into its
Delta table, and creating that Delta table: what a run (sync/ingest.py) does when a table is
copied rather than applied batch by batch; its steps receive the run's context (sync/context.py).

A copy goes in chunks (sync/chunked_copy.py) unless plan.whole_copy_reason says why not; then all
of it is read in one exported snapshot of the reader, whose txmin becomes the watermark, and it
replaces the Delta table's rows (a fan-in source's, its shard's) in one commit that carries
the state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

from pgcdc import faults
from pgcdc.engines import CopyWork, Engine
from pgcdc.errors import TargetError
from pgcdc.lake import copy_writes, evolve, shards, tablelog, target
from pgcdc.source import capture, chunks, enrich, events, partitions, snapshots
from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column, columns_of, numbers
from pgcdc.source.mirror import mark_committing, register_table
from pgcdc.source.snapshots import Held
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.chunked_copy import chunk_rows, copy_in_chunks, found_rows
from pgcdc.sync.pass_cut import PassCut, leave
from pgcdc.sync.report import rewritten
from pgcdc.sync.plan import copy_on_driver, one_chunk, partition_columns, whole_copy_reason
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


_log = logging.getLogger(__name__)


def create_target(ctx: RunContext, primary: psycopg.Connection, t: AttachedTable, path: str,
                  source: "StructType", columns: list[Column]) -> None:
    """Create the table's Delta table if there is none (only ever in an empty place). The
    sources of a fan-in share one: they create it one at a time, under an advisory lock on
    its path that the others' lanes and workers take too (a create seen half-made would
    look like somebody's files)."""
    s = ctx.settings
    if target.is_delta(ctx.spark, path):
        return
    if t.into is None:
        target.create_table(ctx.spark, path, target.NewTable(source, t.key_columns, s.consumer, t.name,
                                                             partition_by=partition_columns(t),
                                                             ids=numbers(columns)),
                            s.target)
        return
    lock = ("select pg_advisory_lock(hashtext(%s))", "select pg_advisory_unlock(hashtext(%s))")
    primary.execute(lock[0], (f"pgcdc fan-in {path}",))
    try:
        if not target.is_delta(ctx.spark, path):
            target.create_table(ctx.spark, path, target.NewTable(source, t.key_columns, s.consumer, t.into, fan_in=True),
                                s.target)
    finally:
        if not primary.broken:
            primary.execute(lock[1], (f"pgcdc fan-in {path}",))


CHUNKED = "copied in chunks, each chunk in a snapshot of its own"


def copy_table(ctx: RunContext, w: TableWork, last_batch: int, engine: Engine | None = None,
               cut: PassCut | None = None, why: str = "") -> tuple[ConsumerState, PassCut | None]:
    """Copy the whole table (first sync or resync), replacing the Delta table's contents; the
    one place that decides how, and whether the table stays in the pass's `cut` (given while it
    reads in it; `why`: what made the copy, named where it leaves). Returns the state (it may
    still hold a copy under way if the job was asked to stop between chunks) and the cut the
    table goes on in.

    - In chunks where it can (sync/chunked_copy.py): out of the cut, whose snapshot the copy lets
      go first (copy_in_chunks), so no snapshot is held for longer than a chunk's read.
    - Else in one snapshot, all JDBC partitions reading in it, a small table by `engine` itself
      where it can (plan.copy_on_driver, Engine.copy): the pass's, joining its cut, where the
      table holds no more than one chunk and the queue keeps its events from that snapshot on
      (`_outside`) and was not rewritten (or created) after it; else one of its own, leaving the
      cut. The snapshot's txmin becomes the watermark: changes it does not show are in the queue
      above it, which keeps them from the registration on.
    (Six parameters: the cut and why the table is copied, for the cut's record.)"""
    reader, jdbc, t, columns, path = w.reader, w.jdbc, w.t, w.columns, w.path
    size = partitions.size(reader, t.name)
    key, uncut = chunks.cut_key(reader, t, columns)
    log = tablelog.read_state(ctx.spark, path, need_txns=False)
    if t.into is not None and _retyped_alike(ctx, reader, t, path, ctx.source_schema(jdbc, t, columns), log):
        log = tablelog.read_state(ctx.spark, path, need_txns=False)
    per_chunk = chunk_rows(ctx.settings.copies, size)
    if whole_copy_reason(log, t, ctx.target_schema(jdbc, t, columns), size, per_chunk, uncut) is None:
        assert key is not None
        cut = leave(cut, t, f"{CHUNKED} ({why})" if why else CHUNKED, ctx.routine)
        return copy_in_chunks(ctx, w, key, None, last_batch, size), cut
    registered = register_table(w.primary, ctx.settings.consumer, t.table_id, path)
    refused = None if cut is None else _outside(cut, size, per_chunk, registered)
    if cut is not None and refused is None:
        try:
            state = _copy(ctx, w, _Whole(last_batch, registered, engine, size, cut.held))
        except Exception as exc:
            if not rewritten(exc):
                raise
            refused = "it was created or rewritten after the pass's snapshot, which shows it empty"
        else:
            cut.copied_in(t, state)
            return state, cut
    cut = leave(cut, t, f"copied in a snapshot of its own ({why}; {refused})" if why else
                f"copied in a snapshot of its own ({refused})", ctx.routine)
    return events.once_reached(reader, registered, ctx.settings.source.reader_role,
                               lambda: _copy(ctx, w, _Whole(last_batch, registered, engine, size))), cut


def _outside(cut: PassCut, size: partitions.Size, per_chunk: int, registered: int) -> str | None:
    """Why a whole copy cannot read in the pass's snapshot, or None: the pass no longer lets
    tables read in it, the table holds more than a chunk (its copy would hold the snapshot as
    long as it reads: it gets one of its own), or the queue keeps its events only from after the
    snapshot (`registered`: a first copy registered since, or a standby that has not replayed
    the registration)."""
    if not cut.open():
        return cut.late()
    if not one_chunk(size, per_chunk):
        return "it holds more than one chunk, and the pass's snapshot is held for no copy that long"
    if registered > cut.held.snap.txmin:
        return "the queue keeps its events only from after the pass's snapshot (it was registered since)"
    return None


def _retyped_alike(ctx: RunContext, reader: psycopg.Connection, t: AttachedTable, path: str, source: "StructType",
                   log: tablelog.LogState) -> bool:
    """Retype the fan-in's Delta table where this source's columns have other types than it holds
    and every attached source of the fan-in has the same PostgreSQL type there now (they were
    altered alike: shards.retype); True if it did. A source that differs still is named, and this
    source's copy refused until it is altered too (TargetError)."""
    have = {f.name: f.dataType for f in log.schema().fields}
    retyped = {f.name: f.dataType for f in source.fields if f.name in have and have[f.name] != f.dataType}
    if not retyped:
        return False
    sources = [a.name for a in capture.list_attached(reader) if a.into == t.into]
    found = columns_of(reader, sources)
    mine = {c.name: c.type_sql for c in found.get(t.name) or []}
    for other in sources:
        for c in found.get(other) or []:
            if c.name in retyped and c.type_sql != mine.get(c.name):
                raise TargetError(f"column {c.name} of {t.name} is {mine.get(c.name)}, but {other} has it as "
                                  f"{c.type_sql}: alter every source of {t.into} alike; its Delta table keeps "
                                  f"{have[c.name].simpleString()} until they agree (the other sources sync meanwhile)")
    what = ", ".join(f"{n} {have[n].simpleString()} -> {d.simpleString()}" for n, d in retyped.items())
    with target.conflicts(path, f"retyping {t.into}"):
        shards.retype(ctx.spark, path, retyped)
    ctx.say(f"{t.into}: every source has its new column types: its Delta table retyped {what} (every shard's rows "
            "rewritten; each source's copy follows)", log=_log)
    return True


@dataclass(frozen=True)
class _Whole:
    """A copy in one snapshot: the batch number it follows, the txid the queue keeps the table's
    events from (register_table), the engine that may write it, the table's size, and the
    pass's snapshot it reads in (`held`), or None: one of its own."""

    last_batch: int
    registered: int
    engine: Engine | None
    size: partitions.Size
    held: Held | None = None


def _copy(ctx: RunContext, w: TableWork, whole: _Whole) -> ConsumerState:
    """copy_table's copy in one snapshot of the reader (the pass's, or its own, which must have
    reached the registration)."""
    primary, reader, jdbc, t, columns, path = w.primary, w.reader, w.jdbc, w.t, w.columns, w.path
    size, engine = whole.size, whole.engine
    with snapshots.reading(reader, whole.held):  # held open while Spark copies: the partitions share its snapshot
        if whole.held is not None:
            snap, exported = whole.held.snap, whole.held.exported
        else:
            snap = events.take_snapshot(reader)
            if snap.txmin < whole.registered:  # a standby that has not replayed the registration yet
                raise events.Behind(snap.txmin)
            exported = reader.execute("select pg_export_snapshot()").fetchone()[0]
        ctx.say(f"{t.name}: copying the whole table ({size.total_pages} pages"
                f"{', in the pass snapshot' if whole.held is not None else ''}) ...", log=_log)
        # the transactions at or above txmin whose changes the snapshot shows are copied too
        applied = events.visible_at_or_above(reader, t.table_id, snap)
        state = ConsumerState(ctx.settings.consumer, t.name, t.table_id, w.identity, snap.txmin,
                              batch=whole.last_batch, columns=ctx.fingerprint(t, columns),
                              shard=t.fan_in_shard).next(snap.txmin, applied)

        def before_commit() -> None:
            mark_committing(primary, state, path)  # after the snapshot the copy reads
            faults.failpoint("before-copy-commit")
        written = None
        if engine is not None and copy_on_driver(size.bytes, engine.name, t, ctx.landing):
            written = engine.copy(CopyWork(ctx.spark, path, lambda: enrich.fetch_table(reader, t, columns),
                                           ctx.source_schema(jdbc, t, columns), t.key_columns, state,
                                           before_commit))
        if written is None:
            rows = enrich.read_table(ctx.spark, jdbc, t, columns, ctx.settings.ingest.jdbc_partitions,
                                     size.pages, exported)
            before_commit()
            written = copy_writes.overwrite(ctx.spark, path, rows, state, t.key_columns, ctx.landing, partition_columns(t))
    state = ctx.committed(primary, path, state, written, copied=True)
    w.report.copied = found_rows(ctx, t, path, written, None)
    if t.into is None:  # (the copy wrote the table's columns as they are now)
        evolve.record(ctx.spark, path, tablelog.read_state(ctx.spark, path, need_txns=False), numbers(columns))
    return state


def resume_copy(ctx: RunContext, w: TableWork, state: ConsumerState, engine: Engine | None = None) -> ConsumerState:
    """Go on with the chunked copy `state` holds, after its last committed chunk; one whose key
    can no longer be cut (its index dropped, say) is copied again in one snapshot."""
    key, uncut = chunks.cut_key(w.reader, w.t, w.columns)
    if key is None:
        ctx.say(f"{w.t.name}: its copy under way cannot go on in chunks ({uncut}): copying it again in one snapshot", log=_log)
        return copy_table(ctx, w, state.batch, engine)[0]
    return copy_in_chunks(ctx, w, key, state, state.batch, partitions.size(w.reader, w.t.name))
