"""A batch that truncated or dropped partitions of a partitioned table: before the batch applies,
the Delta table's rows in those partitions' bounds (source/bounds.py) are replaced by the rows
the root holds in them now, read in one snapshot (the pass's, in a cut), in one commit carrying
the consumer's state (the same watermark, the next batch number). Only those partitions' rows
are read and rewritten, not the table.

Why it is exact: txid order is not commit order, so a transaction with a lower txid may have
written the partition after its TRUNCATE committed; a delete of the bound alone would lose that
row. Replacing the bound with what PostgreSQL holds there now is right whatever the order (a
copy's argument, bounded to the partition): every transaction below the batch's upper txid had
ended when it was planned, so the snapshot shows each of them; a later change is a later
batch's, which reads its keys again. The batch then applies its keys as any other. A kill
between the two commits repeats the replacement (it is idempotent) and then the batch.
"""

from __future__ import annotations

import logging
import time

from pgcdc import faults, records
from pgcdc.lake import copy_writes
from pgcdc.source import bounds, enrich, events, snapshots
from pgcdc.source.columns import unchanged
from pgcdc.source.mirror import mark_committing
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.pass_cut import PassCut
from pgcdc.sync.report import columns_read
from pgcdc.watermark import ConsumerState

_log = logging.getLogger(__name__)


def truncated_rows(w: TableWork, batch: events.Batch) -> bounds.Rows | str | None:
    """The rows of the partitions `batch` truncated or dropped (None: it did not), or why no
    predicate names them (the table is then copied: plan.next_step)."""
    if not batch.partitions:
        return None
    try:
        return bounds.predicates(w.reader, events.truncated(w.reader, batch), w.columns)
    except bounds.Unbounded as unbounded:
        return str(unbounded)


def replace_partitions(ctx: RunContext, w: TableWork, rows: bounds.Rows, state: ConsumerState,
                       batch: events.Batch, cut: PassCut | None) -> ConsumerState:
    """Replace the Delta table's rows of `rows`' bounds by the root's rows there now; the state
    committed with them: `batch`'s where it holds nothing else (no key), else the watermark
    unchanged (ConsumerState.chunk), for the batch to apply next. Where PostgreSQL holds no row
    there (a partition truncated or dropped and left so), a DELETE, which deletion vectors make
    cheap; else the rows found replace the bound (rewriting the files it cuts)."""
    primary, reader, t, columns, path = w.primary, w.reader, w.t, w.columns, w.path
    began = time.monotonic()
    where = " and ".join([f"({rows.pg})", unchanged(t.table_id, columns)] + ([f"({t.predicate})"] if t.predicate else []))
    new = batch.next_state(state) if batch.keys == 0 else state.chunk(None)
    with columns_read(), snapshots.reading(reader, None if cut is None else cut.held):  # (columns gone: ColumnsChanged)
        exported = cut.held.exported if cut is not None else \
            reader.execute("select pg_export_snapshot()").fetchone()[0]
        found = int(reader.execute(f"select count(*) from {t.name} src where {where}").fetchone()[0])
        mark_committing(primary, new, path)  # (after the snapshot the rows are read in)
        faults.failpoint("before-partition-commit")
        if found == 0 and not ctx.landing.soft_deletes:
            written = copy_writes.delete_rows(ctx.spark, path, new, rows.delta)
        else:
            frame = enrich.read_queries(ctx.spark, w.jdbc, t, columns, [
                f"select {enrich.select_list(columns, 'src', t)} from {t.name} src where {where}"], exported)
            written = copy_writes.replace_rows(ctx.spark, path, frame, new, rows.delta, t.key_columns,
                                               ctx.landing)
    new = ctx.committed(primary, path, new, written)
    faults.failpoint("after-partition-commit")
    seconds = round(time.monotonic() - began, 3)
    ctx.say(f"{t.name}: partitions truncated or dropped ({', '.join(rows.names)}): their rows replaced by the "
            f"{found} PostgreSQL holds there now ({seconds:.2f} s)",
            record=records.Partitions(t.name, new.batch, rows.names, found, seconds), log=_log)
    w.report.batches += 1
    w.report.events += batch.events if batch.keys == 0 else 0
    return new
