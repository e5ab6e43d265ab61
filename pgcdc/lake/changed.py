"""The rows a Delta table changed after a version: what a restore to an earlier point must read
again from PostgreSQL (checks/rewind.py), found from the table's own log, so the work grows
with the commits made since, not with the table.

The commits after `since` name every data file they added or removed (a file whose deletion
vector changed is removed and added again under its name). Only those files can hold a row that
differs between the two versions: their rows are read at both versions, and the keys whose rows
differ (or that only one version holds) are the answer. A file another writer rewrote (OPTIMIZE)
is read too, and its rows, unchanged, drop out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc.lake import shards, tablelog
from pgcdc.lake.paths import spark_ident

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def touched_files(spark: "SparkSession", path: str, since: int) -> set[str] | str:
    """The names of the data files the commits after version `since` added or removed, or why they
    cannot be known (a commit the log no longer holds)."""
    names: set[str] = set()
    for version in range(since + 1, tablelog.latest_version(spark, path) + 1):
        actions = tablelog.commit_actions(spark, path, version)
        if actions is None:
            return f"its log no longer holds commit {version} (log retention)"
        for action in actions:
            for kind in ("add", "remove"):
                if kind in action:
                    names.add(str(action[kind]["path"]).rsplit("/", 1)[-1])
    return names


def changed_since(spark: "SparkSession", path: str, since: int, keys: list[str],
                  shard: int | None = None) -> "DataFrame | str":
    """The keys (columns `keys`) whose row differs between version `since` and the newest one, or
    that one of them holds alone; a fan-in source's (`shard`) alone. Or why they cannot be found."""
    from pyspark.sql import functions as F

    touched = touched_files(spark, path, since)
    if isinstance(touched, str) or not touched:
        return touched if isinstance(touched, str) else \
            spark.read.format("delta").load(path).select(*[spark_ident(k) for k in keys]).limit(0)
    latest = tablelog.latest_version(spark, path)

    def side(version: int, mark: str) -> "DataFrame":
        rows = spark.read.format("delta").option("versionAsOf", version).load(path)
        rows = rows.where(F.col("_metadata.file_name").isin(sorted(touched)))
        if shard is not None:
            rows = rows.where(shards.where(shard))
        others = [spark_ident(c) for c in rows.columns]
        return rows.withColumn(mark, F.expr(f"xxhash64({', '.join(others)})"))
    now, then = side(latest, "_h_now"), side(since, "_h_then")
    old = then.select(*[F.col(spark_ident(k)).alias(f"_k{i}") for i, k in enumerate(keys)], "_h_then")
    joined = now.join(old, [now[spark_ident(k)].eqNullSafe(old[f"_k{i}"]) for i, k in enumerate(keys)], "full_outer")
    differ = joined.where(~F.col("_h_now").eqNullSafe(F.col("_h_then")))
    return differ.select(*[F.coalesce(now[spark_ident(k)], old[f"_k{i}"]).alias(k) for i, k in enumerate(keys)])
