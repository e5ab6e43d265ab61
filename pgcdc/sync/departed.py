"""Rows of fan-in sources that left (detached, dropped, attached elsewhere: pgcdc.shard_gone),
removed from the consumer's Delta table of the fan-in by its next run.

A source that left has no table any more for a run to sync, so every run looks at the
recorded departures (a query on a table that is empty unless sources left): where the
consumer's Delta table of the fan-in still holds the source's state, its shard's rows are
deleted in one commit (its partition alone) and then its state; a crash in between deletes
again (no rows) next time. `pgcdc detach --keep-rows` leaves them, and attaching a source
under that shard again ends the departure (its first run asks for `pgcdc resync`, which
replaces the shard's rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc.lake import shards, target
from pgcdc.lake.paths import target_path
from pgcdc.lake.state import read_state_file, remove_state_file
from pgcdc.errors import first_line
from pgcdc.watermark import state_key

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession


def remove_departed(spark: "SparkSession", primary: "psycopg.Connection", consumer: str, root: str) -> list[str]:
    """Remove the rows of departed fan-in sources from the consumer's Delta tables; a line for
    each removal (or failure: a later run tries again)."""
    from delta.tables import DeltaTable

    lines = []
    for into, shard, name in primary.execute("select into_table, shard, table_name from pgcdc.shard_gone "
                                             "where not keep_rows order by into_table, shard").fetchall():
        path, key = target_path(root, into), state_key(consumer, shard)
        if read_state_file(spark, path, key) is None or not target.is_delta(spark, path):
            continue  # (not this consumer's fan-in, or its rows are gone already)
        try:
            target.check_owner(spark, path, consumer, into, fan_in=True)
            table = DeltaTable.forPath(spark, path)
            table.delete(shards.where(shard))
            metrics = table.history(1).collect()[0]["operationMetrics"] or {}
            remove_state_file(spark, path, key)
        except Exception as exc:
            lines.append(f"{name} left fan-in {into}; removing its rows ({shards.SHARD} = {shard}) failed: "
                         f"{first_line(exc)}; the next run tries again")
            continue
        lines.append(f"{name} left fan-in {into}: removed its {metrics.get('numDeletedRows', 'unknown number of')} "
                     f"rows ({shards.SHARD} = {shard}) -> {path}")
    return lines
