"""A table's column changes, brought to its Delta table in place before any batch where they
can be (plan.column_step decides, lake/evolve.py does it), without reading the table's rows
from PostgreSQL; the others are copied (sync/copies.py)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pgcdc.lake import evolve, tablelog
from pgcdc.source.added import added_values
from pgcdc.source.added import rewrites_seen
from pgcdc.source.columns import numbers
from pgcdc.sync.plan import SourceColumns, column_step

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from pgcdc.sync.context import RunContext, TableWork

_log = logging.getLogger(__name__)


def in_place(ctx: "RunContext", w: "TableWork", schema: "StructType") -> str | None:
    """Bring the Delta table's columns to the table's (`schema`, as the sync reads them) in place
    where they can; None once they agree, else why the table must be copied."""
    t = w.t
    cols = SourceColumns(schema, numbers(w.columns), {f.name for f in ctx.landing.fields()},
                         lambda numbers: added_values(w.reader, ctx.spark, w.jdbc, t, w.columns, numbers),
                         lambda: rewrites_seen(w.reader))
    step = column_step(ctx.spark, ctx.settings, t, w.path, cols)
    if step is None or isinstance(step, str):
        return step
    began = time.monotonic()
    log = tablelog.read_state(ctx.spark, w.path, need_txns=False)
    mapping = evolve.by_mapping(log, step, ctx.settings.target.column_mapping)
    evolve.apply(ctx.spark, w.path, log, step, mapping)
    if step.said:
        how = "without writing a data file" if step.metadata_only else \
            "by column mapping, without writing a data file" if mapping else "rewriting its Delta table from itself"
        ctx.say(f"{t.name}: its columns changed in place ({step.line()}), {how}, no row read from PostgreSQL "
                f"({time.monotonic() - began:.2f} s)", log=_log)
    return None
