"""One batch applied: its rows read by key (in the pass's snapshot where there is a cut), handed
to the engine that applies the table (pgcdc/engines), the commit checked and the state kept
(RunContext.committed). A run's step (sync/ingest.py calls it); a read that finds the table's
columns changed since the run checked them raises ColumnsChanged, and the run copies the table.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from pgcdc import faults, records
from pgcdc.engines import BatchWork, Engine
from pgcdc.source import enrich, events, partitions
from pgcdc.source.batch_read import BatchRead
from pgcdc.source.mirror import mark_committing
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.pass_cut import PassCut
from pgcdc.sync.report import columns_read
from pgcdc.watermark import ConsumerState

_log = logging.getLogger(__name__)


class Planned(NamedTuple):
    """A batch as planned: in which snapshot, and the table's size then (plan.next_step)."""

    batch: events.Batch
    snap: events.Snapshot
    size: partitions.Size


def apply_batch(ctx: RunContext, engine: Engine, w: TableWork, planned: Planned, state: ConsumerState,
                cut: PassCut | None = None) -> ConsumerState:
    """Apply one planned batch with `engine`, then copy its state next to the table and into
    PostgreSQL. In a pass's cut, every read of the batch's rows (Spark's and the driver's) is
    in its snapshot (the queue's rows of a batch are the same in any later one)."""
    primary, reader, jdbc, t, columns, path, report = w.primary, w.reader, w.jdbc, w.t, w.columns, w.path, w.report
    batch, snap, size = planned
    row_bytes = size.bytes / max(size.rows, 1)  # (rows is -1 before the first analyze)
    s = ctx.settings.ingest
    began = time.monotonic()
    shares = enrich.batch_partitions(batch.keys, s.small_batch_keys, s.jdbc_partitions,
                                     ctx.spark.sparkContext.defaultParallelism)
    new_state = batch.next_state(state)

    # the rows' schema is the one this run checked against the Delta table (same columns)
    read = BatchRead(ctx.spark, jdbc, t, columns, batch, shares, ctx.source_schema(jdbc, t, columns),
                     txids=ctx.landing.metadata, replayed=snap.replayed,
                     snapshot=None if cut is None else cut.held.exported)
    faults.failpoint("before-merge")
    with columns_read():  # (a column renamed or dropped after the run checked them: ColumnsChanged)
        written = engine.apply(BatchWork(ctx.spark, path, t, columns, batch, reader, row_bytes, s, new_state,
                                         read, lambda: mark_committing(primary, new_state, path), ctx.landing,
                                         None if cut is None else cut.held))
    faults.failpoint("after-merge")
    new_state = ctx.committed(primary, path, new_state, written)
    seconds = round(time.monotonic() - began, 3)
    ctx.say(f"{t.name}: batch {new_state.batch} applied by {engine.name}: {batch.events} events, {batch.keys} keys, "
            f"{written.upserted} upserted, {written.deleted} deleted; watermark {new_state.watermark} "
            f"({seconds:.2f} s)", record=records.Batch(t.name, new_state.batch, engine.name, batch.events, batch.keys,
                                                      written.upserted, written.deleted, new_state.watermark,
                                                      seconds), log=_log)
    report.batches += 1
    report.events += batch.events
    report.upserted += written.upserted
    report.deleted += written.deleted
    return new_state
