"""The rows a Delta table changed after a version: what a restore to an earlier point must read
again from PostgreSQL (checks/rewind.py), found from the table's own log, so the work grows
with the commits made since, not with the table.

The commits after `since` name every data file they added or removed (a file whose deletion
vector changed is removed and added again under its name). A data file's rows never change,
only which of them its deletion vector hides. So a key whose row differs between the two
versions is a key of a file added since, or one that a file present at `since` holds at one
version and not at the other (deleted, updated elsewhere, or back after a RESTORE): only the key
columns of the touched files are read. A file another writer compacted (OPTIMIZE) since counts
as touched: its rows are read again, unchanged (more work, not a wrong result).
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
    """The keys (columns `keys`) whose row may differ between version `since` and the newest one
    (a superset: every row a touched file gained or lost), a fan-in source's (`shard`) alone; or
    why they cannot be found. Only key columns are read."""
    touched = touched_files(spark, path, since)
    if isinstance(touched, str):
        return touched
    latest = tablelog.latest_version(spark, path)
    then = {f.rsplit("/", 1)[-1] for f in _at(spark, path, since).inputFiles()}
    old, new = sorted(touched & then), sorted(touched - then)

    def keys_in(version: int, names: list[str]) -> "DataFrame":
        rows = _at(spark, path, version)
        rows = rows.where(rows["_metadata.file_name"].isin(names)) if names else rows.limit(0)
        rows = rows.where(shards.where(shard)) if shard is not None else rows
        return rows.select(*[spark_ident(k) for k in keys])
    before, after = keys_in(since, old), keys_in(latest, old)  # (a file's rows never change: its deletion vector may)
    return keys_in(latest, new).union(before.subtract(after)).union(after.subtract(before)).distinct()


def _at(spark: "SparkSession", path: str, version: int) -> "DataFrame":
    return spark.read.format("delta").option("versionAsOf", version).load(path)
