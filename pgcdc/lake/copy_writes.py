"""A copy's writes to a Delta table (sync/copies.py, sync/chunked_copy.py): the whole table
overwritten, or a chunk's key range replaced, or appended where the table holds nothing there;
each in one commit carrying the consumer's state (lake/target.py's `state_commit`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc.lake import shards, tablelog
from pgcdc.lake.landing import Landing
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.target import Written, conflicts, last_commit, map_columns_if_needed, schema_change, state_commit
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def overwrite(spark: "SparkSession", path: str, rows: "DataFrame", state: ConsumerState, keys: list[str],
              landing: Landing, partition_by: list[str] | None = None) -> Written:
    """Replace the table's contents (first sync or resync) by `rows` (read from PostgreSQL, keyed
    by `keys`) in one commit carrying the state; a fan-in source's (`state.shard`) rows only
    (`replace_rows`). With soft deletes the rows it no longer finds stay, marked (`landing`).

    With the same columns and partitioning (`partition_by`) the table keeps its schema (key
    columns NOT NULL). With other columns, or another partitioning, it takes the source's
    columns, without the JDBC reader's field metadata, and that partitioning; Delta then
    makes every column nullable (it cannot set NOT NULL again). A column renamed to a name
    that needs column mapping turns it on first.
    (Seven parameters: the rows and what they replace, keyed and landed as the table's are.)"""
    log = tablelog.read_state(spark, path, need_txns=False)
    if state.shard is not None:
        return replace_rows(spark, path, rows, state, None, keys, landing, log)
    rows = landing.copied(rows, _replaced(spark, path, None, landing), keys, state.watermark)
    writer = rows.write.format("delta").mode("overwrite")
    have = list(log.metadata.get("partitionColumns") or [])
    want = have if partition_by is None else partition_by
    if schema_change(log.schema(), rows.schema) is not None or want != have:
        map_columns_if_needed(spark, path, log, rows.schema)
        writer = _plain(rows).write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .partitionBy(*want)
    with state_commit(spark, state), conflicts(path, "its copy"):
        writer.save(path)
    return last_commit(spark, path, state)


def _replaced(spark: "SparkSession", path: str, where: str | None, landing: Landing) -> "DataFrame | None":
    """The rows a copy replaces (matching `where`), which soft deletes keep when the copy no
    longer finds their keys (Landing.copied); None when they go."""
    if not landing.soft_deletes:
        return None
    old = spark.read.format("delta").load(path)
    return old.where(where) if where else old


def replace_rows(spark: "SparkSession", path: str, rows: "DataFrame", state: ConsumerState, where: str | None,
                 keys: list[str], landing: Landing, log: "tablelog.LogState | None" = None) -> Written:
    """Replace the table's rows matching `where` (a chunk's key range, sync/chunked_copy.py; None: every
    row) by `rows` (read from PostgreSQL, keyed by `keys`; with soft deletes, and the replaced rows
    whose keys it no longer finds, marked: `landing`) in one commit carrying the state, with
    Delta's public replaceWhere: every other row stays readable, and Delta refuses a row outside
    `where`. The columns stay the table's (a copy that changes them is one `overwrite`), except
    for a fan-in source's (`state.shard`):
    its rows replace those of its shard's partition only, leaving the other sources' files as
    they are; a column the Delta table lacks is added (nullable: the other sources' rows hold
    null there), a column the source lacks is null in its rows, and a column of another type is
    refused (shards.check_fits). `log`: the table's log as the caller read it.
    (Eight parameters: overwrite's, with the rows replaced (`where`) and the log read already.)"""
    in_shard = shards.where(state.shard) + (f" and ({where})" if where else "") if state.shard is not None else where
    old = _replaced(spark, path, in_shard, landing)
    rows = landing.copied(rows, old.drop(shards.SHARD) if old is not None and state.shard is not None else old, keys,
                          state.watermark)
    rows, merge = _in_shard(spark, path, rows, state, log)
    where = in_shard
    writer = rows.write.format("delta").mode("overwrite")
    if where:
        writer = writer.option("replaceWhere", where)
    if merge:
        writer = writer.option("mergeSchema", "true")
    with state_commit(spark, state), conflicts(path, f"a copy's rows{f' ({where})' if where else ''}"):
        writer.save(path)
    return last_commit(spark, path, state)


def delete_rows(spark: "SparkSession", path: str, state: ConsumerState, where: str) -> Written:
    """Delete the table's rows matching `where` (a fan-in source's, `state.shard`, of its shard
    alone) in one commit carrying the state, with Delta's public DELETE: where the table has
    deletion vectors it marks the rows in them and rewrites no data file (a replaceWhere with
    no rows would rewrite every file the rows lie in). Where no row matches, Delta's DELETE
    commits nothing: an append of no row carries the state instead."""
    from delta.tables import DeltaTable

    if state.shard is not None:
        where = f"{shards.where(state.shard)} and ({where})"
    before = tablelog.latest_version(spark, path)
    with state_commit(spark, state), conflicts(path, f"a delete of rows ({where})"):
        DeltaTable.forPath(spark, path).delete(where)
        if tablelog.latest_version(spark, path) == before:  # (no row matched: Delta committed nothing)
            _no_rows(spark, path)
    return last_commit(spark, path, state)


def state_alone(spark: "SparkSession", path: str, state: ConsumerState) -> Written:
    """Commit the state and no row (a state wound back after a restore: checks/rewind.py)."""
    with state_commit(spark, state), conflicts(path, "a state"):
        _no_rows(spark, path)
    return last_commit(spark, path, state)


def _no_rows(spark: "SparkSession", path: str) -> None:
    """An append of no row: a commit of no file, carrying the session's state."""
    spark.read.format("delta").load(path).limit(0).write.format("delta").mode("append").save(path)


def append_rows(spark: "SparkSession", path: str, rows: "DataFrame", state: ConsumerState, keys: list[str],
                landing: Landing) -> Written:
    """Add `rows` (read from PostgreSQL, keyed by `keys`, landed as `landing` says) to the table in
    one commit carrying the state: a chunk of a copy into a table (a fan-in source's shard of
    it) that holds no row in its range, which has nothing to replace (an append writes no more
    than its rows; Delta's replaceWhere also looks for rows to remove, ~0.6 s a chunk here)."""
    rows, merge = _in_shard(spark, path, landing.copied(rows, None, keys, state.watermark), state, None)
    writer = rows.write.format("delta").mode("append")
    if merge:
        writer = writer.option("mergeSchema", "true")
    with state_commit(spark, state), conflicts(path, "a copy's rows"):
        writer.save(path)
    return last_commit(spark, path, state)


def holds_rows(spark: "SparkSession", path: str, shard: int | None = None) -> bool:
    """Whether the table (a fan-in source's shard of it) may hold a row, marked deleted ones too:
    from its newest version's checksum (no data file: none) where it has one, else by reading."""
    if shard is None:
        files = tablelog.read_state(spark, path, need_txns=False).num_files
        if files is not None:
            return files > 0
    rows = spark.read.format("delta").load(path)
    return bool((rows if shard is None else rows.where(shards.where(shard))).limit(1).count())


def _in_shard(spark: "SparkSession", path: str, rows: "DataFrame", state: ConsumerState,
              log: "tablelog.LogState | None") -> "tuple[DataFrame, bool]":
    """A fan-in source's rows (`state.shard`) as its shard lands them, and whether the write adds
    a column the table lacks (mergeSchema): the rows as they are for any other table."""
    if state.shard is None:
        return rows, False
    log = log or tablelog.read_state(spark, path, need_txns=False)
    schema = log.schema()
    shards.check_fits(path, state.table, schema, rows.schema)
    merge = bool({f.name for f in rows.schema.fields} - {f.name for f in schema.fields})
    if merge:
        map_columns_if_needed(spark, path, log, rows.schema)
    return shards.with_shard(_plain(rows), state.shard), merge


def _plain(rows: "DataFrame") -> "DataFrame":
    """`rows` without the JDBC reader's field metadata (coalesce of one column: the value unchanged),
    for a write that sets the table's schema."""
    from pyspark.sql import functions as F

    return rows.select(*[F.coalesce(F.col(spark_ident(c))).alias(c) for c in rows.columns])
