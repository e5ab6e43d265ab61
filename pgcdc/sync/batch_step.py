"""One planned batch of a table's sync (sync/ingest.py's step 4 takes them one after another):
passed, applied, its truncated partitions' rows replaced, or the table copied instead, as
plan.next_step decides; and a DDL that overtook the batch's read handled on the spot."""

from __future__ import annotations

import logging
from dataclasses import replace

from pgcdc.engines import Engine
from pgcdc.lake.state import write_state_file
from pgcdc.source import events
from pgcdc.source.batch_read import ColumnsChanged
from pgcdc.source.columns import table_columns
from pgcdc.sync import copies
from pgcdc.sync.apply import Planned, apply_batch
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.evolution import in_place
from pgcdc.sync.partition_step import replace_partitions, truncated_rows
from pgcdc.sync.pass_cut import PassCut, leave, overtaken
from pgcdc.sync.plan import next_step
from pgcdc.watermark import ConsumerState

_log = logging.getLogger(__name__)


def batch_step(ctx: RunContext, w: TableWork, state: ConsumerState, cut: PassCut | None, engine: Engine,
               planned: Planned) -> tuple[ConsumerState, PassCut | None, TableWork]:
    """One batch, as plan.next_step decides: passed (nothing of this table below the new
    watermark: no Delta commit), applied (after the rows of the partitions it truncated or
    dropped are replaced: sync/partition_step.py), or copied instead (past recopy_fraction, or the
    table's columns changed while the run read it: then with its columns as they are)."""
    batch, snap, size = planned
    step = next_step(batch, size.rows, ctx.settings.ingest.recopy_fraction, truncated_rows(w, batch))
    if step.kind == "pass":  # (the mirror may move ahead: the events retention then drops are not its)
        return moved(ctx, w.path, state, batch), cut, w
    if step.kind in ("apply", "replace"):
        rows = step.rows  # (the partitions' rows still to replace)
        try:
            if rows is not None:
                state, rows = replace_partitions(ctx, w, rows, state, batch, cut), None
                if batch.keys == 0:  # (nothing else to apply: its commit moved the watermark)
                    return state, cut, w
            return apply_batch(ctx, engine, w, planned, state, cut), cut, w
        except ColumnsChanged as changed:  # DDL since the run began: in place, then the batch, or a copy
            said, left = overtaken(str(changed))
            ctx.say(f"{w.t.name}: {said}", log=_log)
            w = replace(w, columns=table_columns(w.reader, w.t.name))
            why = f"its columns changed: {changed}"
            if w.t.into is None:  # (with on_schema_change = "fail" the table's sync stops here)
                evolved = in_place(ctx, w, ctx.target_schema(w.jdbc, w.t, w.columns))
                parts = None if rows is None else truncated_rows(w, batch)  # (by the columns' new names)
                if evolved is None and not isinstance(parts, str):
                    # (the pass's snapshot shows the old columns: read as the rows are now)
                    cut = leave(cut, w.t, left, ctx.routine)
                    if parts is not None:
                        state = replace_partitions(ctx, w, parts, state, batch, cut)
                        if batch.keys == 0:
                            return state, cut, w
                    return apply_batch(ctx, engine, w, planned, state, cut), cut, w
                why = evolved or f"a partition truncated or dropped ({parts})"
            ctx.say(f"{w.t.name}: copying the table again ({why})", log=_log)
    else:
        ctx.say(f"{w.t.name}: batch holds {step.why}: copying the table instead of applying the batch", log=_log)
        why = f"a batch holding {step.why}"
    state, cut = copies.copy_table(ctx, w, state.batch, engine, cut, why)
    w.report.events += batch.events
    w.report.batches += 1
    return state, cut, w


def moved(ctx: RunContext, path: str, state: ConsumerState, batch: events.Batch | None) -> ConsumerState:
    """The state once a batch without events (or none) is passed (ConsumerState.passed), also kept
    in the state file, so what a run prints and mirrors is what the next run starts from (it
    never goes down). It is as true as the committed state: the table had no events in between."""
    passed = state if batch is None else state.passed(batch.hi, batch.extra)
    if passed != state:
        write_state_file(ctx.spark, path, passed)
    return passed
