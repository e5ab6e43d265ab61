"""Apply: write a batch into its Delta table in one commit that also carries the consumer state.

One MERGE per table per batch: update matched live keys, insert new live keys, delete
keys whose row is gone; after a TRUNCATE also delete every row the batch does not
bring back. The state rides in the same commit (Delta's txn action + commitInfo).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc.enrich import LIVE
from pgcdc.errors import TargetError
from pgcdc.state import ConsumerState, app_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

OWNER = "pgcdc.consumer"
SOURCE = "pgcdc.source"


@dataclass(frozen=True)
class Written:
    """What one Delta commit changed."""

    version: int
    upserted: int
    deleted: int


def target_path(root: str, table: str) -> str:
    """Where a table lands: <root>/<schema>.<table>, names as in PostgreSQL (unquoted);
    a relative local root is taken from the current directory."""
    from pathlib import Path

    schema, name = _split(table)
    folder = f"{schema}.{name}".replace("/", "%2F")
    base = root if "://" in root else str(Path(root).resolve())
    return f"{base.rstrip('/')}/{folder}"


def _split(table: str) -> tuple[str, str]:
    """Split a canonical 'schema.table' name (either part may be "quoted") into raw names."""
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."]+)', table)
    names = [q.replace('""', '"') if q else p for q, p in parts]
    if len(names) != 2:
        raise ValueError(f"not a schema-qualified table name: {table}")
    return names[0], names[1]


def _col(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@contextmanager
def state_commit(spark: "SparkSession", state: ConsumerState) -> Iterator[None]:
    """Session confs that put the state into the next Delta commit; always unset after."""
    confs = {"spark.databricks.delta.write.txnAppId": app_id(state.consumer),
             "spark.databricks.delta.write.txnVersion": str(state.batch),
             "spark.databricks.delta.commitInfo.userMetadata": state.to_json()}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in confs:
            spark.conf.unset(key)


def is_delta(spark: "SparkSession", path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def create_table(spark: "SparkSession", path: str, schema: "StructType", consumer: str, table: str) -> None:
    """Create the empty Delta table, marked with its consumer and source table.

    Refuses a path that already holds files but no Delta log: they are somebody's data.
    """
    from delta.tables import DeltaTable

    jvm = spark._jvm
    folder = jvm.org.apache.hadoop.fs.Path(path)
    fs = folder.getFileSystem(spark._jsc.hadoopConfiguration())
    if fs.exists(folder) and len(fs.listStatus(folder)) > 0:
        raise TargetError(f"{path} holds files but is not a Delta table; move them away or choose another "
                          "target.root (pgcdc creates its tables in empty places only)")

    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in {OWNER: consumer, SOURCE: table, "delta.enableDeletionVectors": "true"}.items():
        builder = builder.property(key, value)
    builder.execute()


def check_owner(spark: "SparkSession", path: str, consumer: str, table: str) -> None:
    """Refuse a Delta table that another consumer, another source table, or nobody from pgcdc owns."""
    props = {r.key: r.value for r in spark.sql(f"show tblproperties delta.{_col(path)}").collect()}
    owner, source = props.get(OWNER), props.get(SOURCE)
    if owner is None:
        raise TargetError(f"Delta table {path} was not created by pgcdc; choose another target.root "
                          "or move that table away")
    if owner != consumer or source != table:
        raise TargetError(f"Delta table {path} belongs to consumer {owner} (source {source}), not to consumer "
                          f"{consumer} (source {table}); set another consumer name or target.root")


def check_schema(target: "StructType", source: "StructType", path: str, table: str) -> list[str]:
    """Compare the Delta schema with the batch's; return the new source columns to add.

    A dropped or retyped source column is an error: applying batches would silently
    leave stale values behind.
    """
    have = {f.name: f.dataType for f in target.fields}
    want = {f.name: f.dataType for f in source.fields if f.name != LIVE}
    dropped = [n for n in have if n not in want]
    if dropped:
        raise TargetError(f"column(s) {', '.join(dropped)} of {path} no longer exist in {table}; "
                          f"run `pgcdc resync {table}` to rebuild the Delta table from the current schema")
    retyped = [f"{n} ({have[n].simpleString()} -> {want[n].simpleString()})" for n in have if want[n] != have[n]]
    if retyped:
        raise TargetError(f"column type change in {table}: {', '.join(retyped)}; "
                          f"run `pgcdc resync {table}` to rebuild the Delta table")
    return [n for n in want if n not in have]


def add_columns(spark: "SparkSession", path: str, source: "StructType", names: list[str]) -> None:
    """Add new source columns to the Delta table (null in existing rows)."""
    cols = ", ".join(f"{_col(f.name)} {f.dataType.simpleString()}" for f in source.fields if f.name in names)
    spark.sql(f"alter table delta.{_col(path)} add columns ({cols})")


def _last_commit(spark: "SparkSession", path: str, state: ConsumerState) -> Written:
    """Find the commit that carries `state` and read its row counts; fail if the MERGE was skipped."""
    from delta.tables import DeltaTable

    for row in DeltaTable.forPath(spark, path).history(20).collect():
        meta = ConsumerState.from_json(row.userMetadata) if row.userMetadata else None
        if meta and meta.run_id == state.run_id:
            m = row.operationMetrics or {}
            upserted = int(m.get("numTargetRowsInserted", m.get("numOutputRows", 0))) + \
                int(m.get("numTargetRowsUpdated", 0))
            deleted = int(m.get("numTargetRowsDeleted", 0))
            return Written(int(row.version), upserted, deleted)
    raise TargetError(f"batch {state.batch} of consumer {state.consumer} was not committed to {path}: another "
                      "writer already committed that batch number; is a second ingest running elsewhere?")


def overwrite(spark: "SparkSession", path: str, rows: "DataFrame", state: ConsumerState) -> Written:
    """Replace the table's contents (first sync or resync) in one commit carrying the state."""
    with state_commit(spark, state):  # overwriteSchema: a resync takes the source's current columns
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
    return _last_commit(spark, path, state)


def merge(spark: "SparkSession", path: str, batch: "DataFrame", keys: list[str], state: ConsumerState,
          truncate: bool, bounds: tuple[int, int] | None = None) -> Written:
    """MERGE one batch (columns + LIVE) into the table in one commit carrying the state.

    `bounds` (lowest, highest key of a one-column integer key) lets Delta skip files by
    their key statistics; it is not used with a TRUNCATE, which must reach every row.
    """
    from delta.tables import DeltaTable

    cols = [f.name for f in batch.schema.fields if f.name != LIVE]
    values = {_col(c): f"s.{_col(c)}" for c in cols}
    on = " and ".join(f"t.{_col(k)} = s.{_col(k)}" for k in keys)
    if bounds is not None and not truncate:
        on = f"t.{_col(keys[0])} between {int(bounds[0])} and {int(bounds[1])} and {on}"
    builder = (DeltaTable.forPath(spark, path).alias("t").merge(batch.alias("s"), on)
               .whenMatchedDelete(condition=f"not s.{LIVE}")
               .whenMatchedUpdate(condition=f"s.{LIVE}", set=values)
               .whenNotMatchedInsert(condition=f"s.{LIVE}", values=values))
    if truncate:  # the table was emptied in PostgreSQL: drop every row this batch does not bring back
        builder = builder.whenNotMatchedBySourceDelete()
    with state_commit(spark, state):
        builder.execute()
    return _last_commit(spark, path, state)
