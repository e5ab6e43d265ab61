"""`pgcdc adopt`: take over a Delta table another tool (or an earlier install) wrote with a
table's rows, instead of copying the table: the Delta table at the table's place under
`target.root` is marked as the consumer's, and the table's sync follows at once, which finds it
holding rows but no state and reconciles it by range (sync/reconcile.py): only the rows that
differ from PostgreSQL's are written, the rest and their files stay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pgcdc.errors import TargetError
from pgcdc.lake import target
from pgcdc.settings import Settings
from pgcdc.source.capture import AttachedTable
from pgcdc.source.sessions import RunSource
from pgcdc.sync.context import RunContext
from pgcdc.sync.plan import table_path
from pgcdc.sync.report import TableReport
from pgcdc.sync.runs import leased_tables, once

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)


def adopt(settings: Settings, names: list[str], spark: "SparkSession | None" = None,
          say: Callable[[str], None] | None = None) -> list[TableReport]:
    """Take over each table's Delta table and sync it (the module docstring), each under its lease,
    in a local Spark session unless given one; each step said."""
    return once(settings, spark, say, names, "adopt", lambda job: leased_tables(
        job, names, lambda src, t, sync: _adopt(job.ctx, src, t, sync)))


def _adopt(ctx: RunContext, src: RunSource, t: AttachedTable, sync: Callable[[], TableReport]) -> TableReport:
    """One table taken over, its lease held; `sync` runs its sync."""
    consumer = ctx.settings.consumer
    path = table_path(src.primary, consumer, t, ctx.settings.target.root)[0]
    if t.into is not None:
        raise TargetError(f"{t.name} is a source of fan-in {t.into}, whose Delta table its sources share: adopt takes "
                          "over a single table's")
    if not target.is_delta(ctx.spark, path):
        raise TargetError(f"there is no Delta table at {path} to take over for {t.name}: put it there (its place under "
                          "target.root), or run `pgcdc ingest`, whose first run copies the table")
    if target.adopt(ctx.spark, path, consumer, t.target_name):
        ctx.say(f"{t.name}: took over {path} for consumer {consumer}; syncing it", log=_log)
    else:
        ctx.say(f"{t.name}: {path} is consumer {consumer}'s already; syncing it", log=_log)
    return sync()
