"""A small table's whole copy written by the driver: its rows read over psycopg in the copy's
snapshot, one Parquet file written with pyarrow (driver_write), and one commit that removes
every file the Delta table had and adds the new one, with the state, as an overwrite.

A Spark copy of a table of a few rows costs a JDBC read and a write job (~1-2 s on 2 cores
whatever the rows): the first sync of many small tables is that times their number. Only
where driver_write can write what Spark would (its `_fits`), and the Delta table's columns
are the source's as the sync reads them (no retyped or renamed column: that copy changes the
schema, which only Spark's overwrite does); anything else returns None and Spark copies.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pgcdc.engines.fast import driver_write
from pgcdc.engines.fast.commit import commit_actions, record_metrics
from pgcdc.engines.fast.deltalog import Opened, read_all_files
from pgcdc.lake.target import Written, schema_change
from pgcdc.spark.jvm import cls, pylist
from pgcdc.spark.jvm import none as jvm_none

if TYPE_CHECKING:
    from pgcdc.engines.work import CopyWork


def copy(work: "CopyWork") -> Written | None:
    """Replace the table's contents with `work.rows()` (values in `work.schema`'s column order) in
    one commit carrying `work.state`; None (nothing written) where Spark has to copy it."""
    from pyspark.sql.types import StructType

    spark, path, schema = work.spark, work.path, work.schema

    o = Opened.of(spark, path)
    txn = o.txn
    stored = StructType.fromJson(json.loads(o.metadata["schemaString"]))
    if schema_change(stored, schema) is not None:
        return None
    table = driver_write.arrow_rows(work.rows(), schema)
    if table is None:
        return None
    files = pylist(spark, read_all_files(o))  # (read whole: a concurrent rewrite fails this commit)
    # (an empty table: no file, as Spark's overwrite of no rows)
    added = driver_write.write(spark, o, table, work.key_columns) if table.num_rows else []
    if added is None:
        return None
    removed = [f.remove() for f in files]
    added_bytes = sum(int(json.loads(a.json())["add"]["size"]) for a in added)
    record_metrics(spark, txn, {"numFiles": len(added), "numOutputRows": table.num_rows,
                                "numOutputBytes": added_bytes, "numRemovedFiles": len(files),
                                "numRemovedBytes": sum(int(f.size()) for f in files)})
    work.before_commit()
    operation = cls(spark, "org.apache.spark.sql.delta.DeltaOperations$Write")(
        getattr(cls(spark, "org.apache.spark.sql.SaveMode"), "Overwrite"), jvm_none(spark), jvm_none(spark),
        jvm_none(spark))
    version = commit_actions(spark, path, txn, removed + added, work.state, operation)
    return Written(version, table.num_rows, 0)

