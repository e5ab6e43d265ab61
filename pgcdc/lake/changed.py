"""The rows a Delta table changed after a version: what a restore to an earlier point must read
again from PostgreSQL (checks/rewind.py), found from the table's own log, so the work grows
with the commits made since, not with the table.

The commits after `since` name every data file they added or removed (a file whose deletion
vector changed is removed and added again under its name). A data file's rows never change,
only which of them its deletion vector hides. So a key whose row differs between the two
versions is a key of a file added since, of one removed since, or of a row that a file there at
both versions hides at one and not the other (deleted, updated into another file, or back after
a RESTORE): for a local table those rows are found by position from the two deletion vectors
(lake/vectors.py) and only they are read; elsewhere Spark compares the file's keys at both
versions. Only key columns are read. A file another writer compacted (OPTIMIZE) since counts
as touched: its rows are read again, unchanged (more work, not a wrong result).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np

from pgcdc.lake import shards, tablelog, vectors
from pgcdc.lake.paths import local_folder, spark_ident

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class _File:
    """A data file the commits after `since` touched: whether it was there at `since` and its
    deletion vector then, whether it is there now and its vector now (log actions' dicts)."""

    then: bool
    vector_then: dict[str, Any] | None = None
    now: bool = False
    vector_now: dict[str, Any] | None = None
    path: str = ""  # relative to the table, as the log names it


def touched(spark: "SparkSession", path: str, since: int, latest: int, then: set[str]) -> dict[str, _File] | str:
    """The data files (by name) the commits after version `since` (up to `latest`) added or
    removed, given the names there at `since` (`then`), or why they cannot be known (a commit the log no longer holds).
    A file's first commit removes it with its vector at `since`; its last one says how it is now."""
    files: dict[str, _File] = {}
    for version in range(since + 1, latest + 1):
        actions = tablelog.commit_actions(spark, path, version)
        if actions is None:
            return f"its log no longer holds commit {version} (log retention)"
        removed = {_name(a["remove"]): a["remove"] for a in actions if "remove" in a}
        added = {_name(a["add"]): a["add"] for a in actions if "add" in a}
        for name in removed.keys() | added.keys():
            f = files.get(name)
            if f is None:
                f = files[name] = _File(name in then, (removed.get(name) or {}).get("deletionVector"), name in then)
            f.path = str((added.get(name) or removed.get(name) or {}).get("path") or f.path)
            f.now = name in added or (f.now and name not in removed)
            f.vector_now = (added.get(name) or {}).get("deletionVector") if f.now else None
    return files


def _name(action: dict[str, Any]) -> str:
    return str(action["path"]).rsplit("/", 1)[-1]


def changed_since(spark: "SparkSession", path: str, since: int, keys: list[str],
                  shard: int | None = None) -> "DataFrame | str":
    """The keys (columns `keys`) whose row may differ between version `since` and the newest one
    (a superset: every row a touched file gained or lost), a fan-in source's (`shard`) alone; or
    why they cannot be found. Only key columns are read."""
    then = {f.rsplit("/", 1)[-1] for f in _at(spark, path, since).inputFiles()}
    latest = tablelog.latest_version(spark, path)
    files = touched(spark, path, since, latest, then)
    if isinstance(files, str):
        return files

    def keys_in(version: int, names: list[str]) -> "DataFrame":
        rows = _at(spark, path, version)
        return _keys(rows.where(rows["_metadata.file_name"].isin(names)) if names else rows.limit(0), keys, shard)
    new = sorted(n for n, f in files.items() if f.now and not f.then)
    gone = sorted(n for n, f in files.items() if f.then and not f.now)
    kept = sorted(n for n, f in files.items() if f.then and f.now)  # (its vector changed)
    folder = local_folder(path)
    if folder is None:  # (a remote table: Spark compares the kept files' keys at both versions)
        before, after = keys_in(since, kept), keys_in(latest, kept)
        return keys_in(latest, new).union(keys_in(since, gone)).union(before.subtract(after)) \
            .union(after.subtract(before)).distinct()
    lost: dict[str, np.ndarray] = {}  # by file: row positions hidden since `since`
    back: dict[str, np.ndarray] = {}  # shown again since (a RESTORE)
    for name in kept:
        was = vectors.hidden(str(folder), files[name].vector_then)
        now = vectors.hidden(str(folder), files[name].vector_now)
        lost[files[name].path], back[files[name].path] = np.setdiff1d(now, was), np.setdiff1d(was, now)
    # (every row of a file added or removed since, hidden ones too: more keys, never fewer; a
    # file's rows are the same at every version, so a kept file's lost and shown rows read at once)
    read: dict[str, np.ndarray | None] = {files[n].path: None for n in new + gone}
    read |= {p: np.union1d(lost[p], back[p]) for p in lost}
    rows = _read_on_driver(spark, path, str(folder), read, keys, shard)
    if rows is None:  # (key types the driver does not read: Spark reads the rows at those positions)
        rows = keys_in(latest, new).union(keys_in(since, gone)).union(
            _at_positions(spark, path, since, lost, keys, shard)).union(
            _at_positions(spark, path, latest, back, keys, shard))
    return rows.distinct()


def _keys(rows: "DataFrame", keys: list[str], shard: int | None) -> "DataFrame":
    return (rows.where(shards.where(shard)) if shard is not None else rows).select(*[spark_ident(k) for k in keys])


def _at_positions(spark: "SparkSession", path: str, version: int, positions: dict[str, np.ndarray],
                  keys: list[str], shard: int | None) -> "DataFrame":
    """The keys of the rows at these row positions of these files (by path), as version `version`
    shows them: a broadcast join, no shuffle of the files' rows. (Six parameters: where, which
    rows, what of them.)"""
    from pyspark.sql import functions as F

    rows = _at(spark, path, version)
    wanted = [(p.rsplit("/", 1)[-1], int(i)) for p, at in positions.items() for i in at]
    if not wanted:
        return _keys(rows.limit(0), keys, shard)
    rows = rows.where(rows["_metadata.file_name"].isin(sorted({n for n, _ in wanted}))).select(
        "*", F.col("_metadata.file_name").alias("_pgcdc_file"), F.col("_metadata.row_index").alias("_pgcdc_row"))
    chosen = spark.createDataFrame(wanted, "_pgcdc_file string, _pgcdc_row long")
    return _keys(rows.join(F.broadcast(chosen), ["_pgcdc_file", "_pgcdc_row"]), keys, shard)


def _read_on_driver(spark: "SparkSession", path: str, folder: str, positions: dict[str, np.ndarray | None],
                    keys: list[str], shard: int | None) -> "DataFrame | None":
    """The keys at these row positions (None: every row) of these local data files (by path
    relative to `folder`), read on the driver with pyarrow (the key columns of only those files,
    no Spark job over them); None where the keys are not plain integers or
    text, or a key is a partition column (not in the files). (Six parameters: the table, where
    it lies, which rows and what of them.)"""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyspark.sql import types as T

    log = tablelog.read_state(spark, path, need_txns=False)
    fields = {f.name: f for f in log.schema().fields}
    plain = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType)
    if set(keys) & set(log.metadata.get("partitionColumns") or []) or \
            not all(isinstance(fields[k].dataType, plain) for k in keys) or any(":" in p for p in positions):
        return None  # (a path with a scheme: a file outside the table's folder)
    wanted = keys + ([shards.SHARD] if shard is not None else [])
    physical = [str(fields[k].metadata.get("delta.columnMapping.physicalName", k)) for k in wanted]
    parts = []
    for relative, at in positions.items():
        if at is None or len(at):
            table = pq.read_table(f"{folder}/{unquote(relative)}", columns=physical)
            parts.append((table if at is None else table.take(pa.array(at.astype(np.int64)))).rename_columns(wanted))
    schema = T.StructType([fields[k] for k in keys])
    if not parts:
        return spark.createDataFrame([], schema)
    found = pa.concat_tables(parts)
    if shard is not None:
        found = found.filter(pc.equal(found[shards.SHARD], shard))
    return spark.createDataFrame([tuple(r.values()) for r in found.select(keys).to_pylist()], schema)


def _at(spark: "SparkSession", path: str, version: int) -> "DataFrame":
    return spark.read.format("delta").option("versionAsOf", version).load(path)
