"""`pgcdc reset-watermark`: after a restore to an earlier point (or a failover to a standby that
was behind), each table is reconciled by what changed, not copied.

The restored database still holds the consumer's state as it recorded it at the restore point
(its mirror, `pgcdc.consumer_state`: batch B and its watermark), and the queue's events above it.
Every Delta commit up to B's was made from rows read before that point, so the restored database
holds what they hold or a later change that its queue keeps above B's watermark. Only the commits
after B's may hold rows the restored database never had (changes lost with the restore): their
rows are found from Delta's log (lake/changed.py), the keys that differ between B's version and
the newest queued again as changes (U events, as repair does: checks/repair.py), and then the
state is wound back to B's watermark in one Delta commit. The table's sync that follows applies
those keys (each row read again: a row the restore lost is deleted, one it changed rewritten)
and the restored queue's events above the watermark. Work grows with the commits made since the
restore point. A kill between the queueing and the commit leaves the mirror at B: the next
reset-watermark queues the same keys again (a key queued twice lands once).

A table is copied instead, the reason said, where this cannot hold: the database was restored
from another one (txids of another database), the restored database has no record of the table's
sync, Delta's log no longer holds B's commit or a later one, a copy in chunks was under way, the table
was attached again since, or its key is of a type someone created (the queue cannot take such
keys back from their text).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pgcdc import faults
from pgcdc.diff import canon
from pgcdc.diff.queue import queue_differing, replayed, typed_keys
from pgcdc.lake import changed, copy_writes, target
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.state import load_state, state_from_history
from pgcdc.source.capture import AttachedTable
from pgcdc.source.mirror import mark_committing, mirrored
from pgcdc.source.sessions import RunSource
from pgcdc.sync.context import RunContext
from pgcdc.sync.plan import table_path
from pgcdc.sync.report import TableReport
from pgcdc.settings import Settings
from pgcdc.sync.runs import leased_tables, once
from pgcdc.watermark import ConsumerState, state_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reset:
    """One table after reset-watermark: the keys queued again (None: it was copied, `why`), and
    the report of the sync that followed."""

    table: str
    report: TableReport
    queued: int | None = None
    why: str = ""

    def line(self) -> str:
        if self.queued is None:
            return f"{self.table}: copied again ({self.why})"
        return (f"{self.table}: wound back to the database's record of it; {self.queued} rows Delta changed after "
                f"that were read again, {self.report.upserted} upserted, {self.report.deleted} deleted")


def reset_watermark(settings: Settings, spark: "SparkSession | None" = None,
                    say: "Callable[[str], None] | None" = None) -> list[Reset]:
    """Reset every table of the consumer (the module docstring), holding the whole consumer (no
    worker beside it), in a local Spark session unless given one (runs.once); each line said as
    it is done."""
    return once(settings, spark, say, settings.tables, "reset-watermark", lambda job: leased_tables(
        job, settings.tables, lambda src, t, sync: _said(job.ctx, _reset(job.ctx, src, t, sync, lambda: job.resync_table(
            src, t))), restored=True), restored=True)


def _said(ctx: RunContext, done: Reset) -> Reset:
    ctx.say(done.line(), log=_log)
    return done


def _reset(ctx: RunContext, src: RunSource, t: AttachedTable, sync: "Callable[[], TableReport]",
           copy: "Callable[[], TableReport]") -> Reset:
    """One table's reset: wound back and its changed rows queued, or `copy`; then `sync`."""
    path = table_path(src.primary, ctx.settings.consumer, t, ctx.settings.target.root)[0]
    found = _recorded(ctx, src, t, path)
    if isinstance(found, str):
        return Reset(t.name, copy(), why=found)
    if isinstance(typed := typed_keys(src.primary, t), str):  # (its keys cannot be queued again)
        return Reset(t.name, copy(), why=f"the queue cannot take {typed}")
    now, then = found
    assert then.version is not None
    rows = changed.changed_since(ctx.spark, path, then.version, t.key_columns, t.fan_in_shard)
    if isinstance(rows, str):
        return Reset(t.name, copy(), why=f"Delta's changes since the restore point are unknown: {rows}")
    types = {f.name: f.dataType for f in rows.schema.fields}
    framed = canon.spark_framed([canon.delta_value(spark_ident(k), types[k]) for k in t.key_columns])
    keys = [r[0] for r in rows.selectExpr(framed).collect()]
    queued = queue_differing(src.primary, t, keys, typed) if keys else 0
    faults.failpoint("before-rewind-commit")
    state = now.wound_back(then)
    mark_committing(src.primary, state, path)
    ctx.committed(src.primary, path, state, copy_writes.state_alone(ctx.spark, path, state))
    replayed(src.primary, src.reader)  # (the sync reads the queued keys on the reader)
    return Reset(t.name, sync(), queued)


def _recorded(ctx: RunContext, src: RunSource, t: AttachedTable, path: str) -> tuple[ConsumerState, ConsumerState] | str:
    """(Delta's newest state, the state of the batch the restored database recorded: its
    watermark as recorded), or why the table must be copied."""
    key = state_key(ctx.settings.consumer, t.fan_in_shard)
    now = load_state(ctx.spark, path, key) if target.is_delta(ctx.spark, path) else None
    if now is None:
        return "no state of this consumer in Delta"
    current = src.identity if "/" in now.system_id else src.identity.split("/")[0]  # (as plan.check_state)
    if now.system_id != current:
        return f"Delta was synced from another database (identity {now.system_id}, now {current})"
    if now.table_id != t.table_id:
        return "the table was attached again since it was synced"
    if now.copy is not None:
        return "a copy in chunks was under way"
    record = mirrored(src.primary, ctx.settings.consumer, [t.table_id]).get(t.table_id)
    if record is None or record.batch == 0:
        return "the restored database has no record of the table's sync"
    if record.batch > now.batch:
        return f"the database records batch {record.batch}, newer than Delta's {now.batch}"
    then = state_from_history(ctx.spark, path, key, record.batch)
    if then is None or then.copy is not None:
        return f"Delta's log no longer holds batch {record.batch}'s commit" if then is None else \
            "a copy in chunks was under way at the restore point"
    return now, replace(then, watermark=record.watermark, out_of_order=record.out_of_order)
