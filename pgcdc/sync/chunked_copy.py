"""A copy in chunks: the table read one key range at a time (pgcdc/source/chunks.py), each in a
short snapshot of its own, every range replacing the same range of its Delta table in one
commit that carries the copy's progress (ConsumerState.copy); where the Delta table (a fan-in
source's shard of it) held no row when the copy began, a range holds nothing to replace and its
rows are appended (CopyProgress.append: Delta's replaceWhere costs ~0.6 s a chunk more). A copy killed anywhere resumes
after its last committed chunk; readers see every row throughout (a chunk replaces only its
range). Which copies go in chunks is decided in sync/plan.py (`whole_copy_reason`).

Why it is exact: the copy registers the table, then takes a first snapshot S0 whose txmin
becomes the watermark, with the transactions S0 shows above it applied (as a copy in one
snapshot does). Every chunk's snapshot comes after S0 and has reached that txmin, so it shows
each change S0 shows. A change a chunk does not show was made by a transaction S0 did not show,
at or above the txmin: it is in the queue, which batches apply once the copy has ended, each
reading its key's current row again. The queue keeps those events from the registration on; a
retention limit reached meanwhile (a resync asked for) starts the copy again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING


from pgcdc import faults, records
from pgcdc.lake import copy_writes, landing, shards
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.target import Written
from pgcdc.source import chunks, enrich, events, partitions, snapshots
from pgcdc.source.capture import AttachedTable
from pgcdc.source.chunks import CutKey
from pgcdc.source.mirror import mark_committing, register_table, resync_reason
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.progress import Meter, reached
from pgcdc.source.columns import REWRITE_TRIES
from pgcdc.sync.report import rewritten
from pgcdc.watermark import ConsumerState, CopyProgress, TxidSet

if TYPE_CHECKING:
    from pgcdc.settings import CopySettings


_log = logging.getLogger(__name__)


def chunk_rows(copies: "CopySettings", size: partitions.Size) -> int:
    """The first chunk's rows: `copies.chunk_rows`, fewer for wide rows (at most ~`copies.chunk_mb`
    MiB of the table)."""
    if size.rows <= 0:
        return copies.chunk_rows
    row_bytes = max(1.0, size.bytes / size.rows)
    return max(1, min(copies.chunk_rows, int(copies.chunk_mb * 1024 * 1024 / row_bytes)))


def paced_rows(copies: "CopySettings", first: int, rows: int, seconds: float) -> int:
    """The next chunk's rows after one of `rows` took `seconds`: as many as that pace reads in
    `copies.chunk_seconds`, between an eighth of the first chunk's `first` and 64 times it (0 s:
    `first`). A chunk's time includes its fixed cost, so a small one undershoots; the next corrects."""
    if copies.chunk_seconds <= 0 or rows <= 0 or seconds <= 0:
        return first
    return max(max(1, first // 8), min(first * 64, int(rows / seconds * copies.chunk_seconds)))


def copy_in_chunks(ctx: RunContext, w: TableWork, key: CutKey, state: ConsumerState | None, last_batch: int,
                   size: partitions.Size) -> ConsumerState:
    """Copy the table (of `size`) in chunks, from the start (`state` None or without a copy under
    way) or from where `state`'s copy got to. Returns the state after the last chunk, or the
    state of a copy still under way if the run was asked to stop between chunks. The pass's cut
    lets its snapshot go first (PassCut.close): no snapshot is held for longer than a chunk's."""
    s, t = ctx.settings, w.t
    if ctx.cut is not None:
        ctx.cut.close(f"a copy of {t.name} in chunks began")
    rows, total = chunk_rows(s.copies, size), max(0, int(size.rows))
    if state is None or state.copy is None:
        state, first = _begin(ctx, w, last_batch, rows, total), True
    else:  # (resumed)
        first = False
        ctx.say(f"{t.name}: resuming its copy at {reached(state.copy.rows, state.copy.total)}, "
                f"chunk {state.copy.chunks + 1}",
                record=records.CopyResume(t.name, state.copy.chunks + 1, state.copy.rows, state.copy.total), log=_log)
    assert state.copy is not None
    meter = Meter(ctx, t.name, state.copy, rows)
    parts = max(1, min(s.ingest.jdbc_partitions, ctx.spark.sparkContext.defaultParallelism))
    began, read, first_rows = time.monotonic(), 0, rows
    try:
        while True:
            if not first and resync_reason(w.primary, s.consumer, t.table_id) is not None:
                # (the queue may have dropped events this copy relies on: it starts again)
                ctx.say(f"{t.name}: consumer {s.consumer} fell past the retention limit during the copy: copying "
                        "it again from the start", log=_log)
                state, first = _begin(ctx, w, state.batch, rows, total), True
                assert state.copy is not None
                meter = Meter(ctx, t.name, state.copy, rows)
            assert state.copy is not None
            took, keys = time.monotonic(), state.copy.rows
            state, n = _chunk_read_again(ctx, w, key, state, _Size(rows, parts), first)
            if state.copy is not None:  # (the keys it covered: with a predicate it finds fewer rows)
                rows = paced_rows(s.copies, first_rows, state.copy.rows - keys, time.monotonic() - took)
            first, read = False, read + n
            meter.chunk(state.copy, n)
            if state.copy is None or ctx.stopping():
                break
            _throttle(s.copies.max_rows_per_second, read, time.monotonic() - began)
    finally:
        meter.close()
    w.report.copied = (w.report.copied or 0) + read
    return state


def _begin(ctx: RunContext, w: TableWork, last_batch: int, rows: int, total: int) -> ConsumerState:
    """A new copy's starting state: registered, then its first snapshot's txmin as the watermark
    (`rows`: per chunk; `total`: the table's estimated rows, 0 if unknown)."""
    s, primary, reader, t, path = ctx.settings, w.primary, w.reader, w.t, w.path
    registered = register_table(primary, s.consumer, t.table_id, path)

    def first_snapshot() -> tuple[events.Snapshot, TxidSet]:
        with snapshots.reading(reader):
            snap = events.take_snapshot(reader)
            if snap.txmin < registered:  # a standby that has not replayed the registration yet
                raise events.Behind(snap.txmin)
            return snap, events.visible_at_or_above(reader, t.table_id, snap)
    snap, applied = events.once_reached(reader, registered, s.source.reader_role, first_snapshot)
    ctx.say(f"{t.name}: copying the table in chunks of {rows} rows" + (f" (~{total} rows)" if total else ""),
            record=records.CopyStart(t.name, total), log=_log)
    state = ConsumerState(s.consumer, t.name, t.table_id, w.identity, snap.txmin, batch=last_batch,
                          columns=ctx.fingerprint(t, w.columns), shard=t.fan_in_shard)
    return replace(state.next(snap.txmin, applied), batch=last_batch,
                   copy=CopyProgress(None, 0, 0, total, time.time(),
                                     append=not copy_writes.holds_rows(ctx.spark, path, t.fan_in_shard)))


@dataclass(frozen=True)
class _Size:
    """How a copy's chunks are cut: rows a chunk, and JDBC reads (shares) a chunk."""

    rows: int
    parts: int


def _chunk_read_again(ctx: RunContext, w: TableWork, key: CutKey, state: ConsumerState, size: _Size,
                      first: bool) -> tuple[ConsumerState, int]:
    """_chunk, read again in a new snapshot where a rewrite of the table (a TRUNCATE, which its
    T event then brings to Delta, an ALTER TABLE) overtook the chunk's (nothing was committed:
    the chunk is the same)."""
    for _ in range(REWRITE_TRIES - 1):
        try:
            return _chunk(ctx, w, key, state, size, first)
        except Exception as exc:
            if not rewritten(exc):
                raise
            ctx.say(f"{w.t.name}: rewritten while its chunk was read: reading the chunk again", log=_log)
    return _chunk(ctx, w, key, state, size, first)


def _chunk(ctx: RunContext, w: TableWork, key: CutKey, state: ConsumerState, size: _Size,
           first: bool) -> tuple[ConsumerState, int]:
    """Read and commit the next chunk, in one snapshot of the reader held for this chunk only
    (`first`: the copy's first chunk, which registers it as copied)."""
    primary, reader, t, columns, path = w.primary, w.reader, w.t, w.columns, w.path
    assert state.copy is not None
    events.wait_for_txmin(reader, state.watermark, ctx.settings.source.reader_role)
    # The bounds in a statement of their own (any snapshot will do: the ranges only have to
    # cover every key): the exporting transaction must hold no lock on the table. A TRUNCATE
    # waiting for that lock would queue the shares' locks behind its own, and the shares would
    # wait for a transaction that waits for them (on a standby, until replay cancels them).
    chunk = chunks.next_chunk(reader, t, key, chunks.decode(state.copy.after), size.rows, size.parts)
    with snapshots.reading(reader):  # held open while Spark reads and writes the chunk: its shares share it
        exported = reader.execute("select pg_export_snapshot()").fetchone()[0]
        frame = enrich.read_queries(ctx.spark, w.jdbc, t, columns,
                                    [chunks.range_query(t, columns, key, lo, hi) for lo, hi in chunk.ranges], exported)
        progress = None if chunk.last else replace(state.copy, after=chunks.encode(chunk.hi),
                                                  chunks=state.copy.chunks + 1, rows=state.copy.rows + chunk.rows)
        new = state.chunk(progress)
        mark_committing(primary, new, path)  # (after the snapshot the chunk reads)
        faults.failpoint("before-chunk-commit")
        if state.copy.append:  # (nothing in its range to replace)
            written = copy_writes.append_rows(ctx.spark, path, frame, new, t.key_columns, ctx.landing)
        else:
            written = copy_writes.replace_rows(ctx.spark, path, frame, new,
                                               chunks.delta_where(key, chunk.lo, chunk.hi), t.key_columns, ctx.landing)
    new = ctx.committed(primary, path, new, written, copied=first)
    faults.failpoint("after-chunk-commit")
    return new, found_rows(ctx, t, path, written, chunks.delta_where(key, chunk.lo, chunk.hi))


def found_rows(ctx: RunContext, t: AttachedTable, path: str, written: Written, where: str | None) -> int:
    """The rows a copy's commit `written` found in PostgreSQL (of the key range `where`; None:
    all). With soft deletes it also wrote the rows it no longer found, marked, so those found
    are counted: its range's live rows at that version (Delta skips the files outside)."""
    if not ctx.landing.soft_deletes:
        return written.upserted
    from pyspark.sql import functions as F

    rows = ctx.spark.read.format("delta").option("versionAsOf", written.version).load(path)
    for part in (where, None if t.fan_in_shard is None else shards.where(t.fan_in_shard)):
        rows = rows.where(part) if part else rows
    return rows.where(~F.col(spark_ident(landing.DELETED))).count()


def _throttle(max_rows_per_second: int, rows: int, seconds: float) -> None:
    """Wait so that `rows` read in `seconds` stay within `max_rows_per_second` on average (0: no limit)."""
    if max_rows_per_second > 0:
        time.sleep(max(0.0, rows / max_rows_per_second - seconds))
