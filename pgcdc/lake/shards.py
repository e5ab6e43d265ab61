"""A fan-in's Delta table (docs/fan-in.md): several source tables of one shape in one Delta
table, each source's rows under its shard number in SHARD, a key column the table is
partitioned by.

Partitioned by shard, each source's writes touch only its own partition's files: a copy is
Delta's `replaceWhere` of that partition, a batch a MERGE whose condition names it, and
Delta's conflict checks see two sources' commits as disjoint, so sources are applied beside
each other (lanes, workers) and a resync of one leaves the others' files as they were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc.errors import TargetError
from pgcdc.lake.paths import spark_ident

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

SHARD = "_pgcdc_shard"


def where(shard: int) -> str:
    """The Spark SQL predicate of one shard's rows (its partition)."""
    return f"{SHARD} = {int(shard)}"


def folder(shard: int) -> str:
    """The folder of one shard's data files in the table (Delta's partition folder), as its log
    names them."""
    return f"{SHARD}={int(shard)}/"


def with_shard(rows: "DataFrame", shard: int) -> "DataFrame":
    """A source's rows with its shard column, as its fan-in's Delta table holds them."""
    from pyspark.sql import functions as F

    return rows.withColumn(SHARD, F.lit(int(shard)).cast("int"))


def add_column(schema: "StructType") -> "StructType":
    """A source's schema with the shard column (NOT NULL: it is part of the key)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    return StructType([*schema.fields, StructField(SHARD, IntegerType(), False)])


def change(delta: "StructType", source: "StructType", copied: str, now: str) -> str | None:
    """How a fan-in source's columns (`source`, as the sync reads them) changed since its rows
    were copied, or None. The Delta table's columns are the union of its sources', so a column
    it holds that the source lacks is another source's: a drop shows only in the fingerprint of
    the source's columns (`now`) against the one its rows were copied with (`copied`, "":
    unknown)."""
    have = {f.name: f.dataType for f in delta.fields}
    parts = []
    if added := [f.name for f in source.fields if f.name not in have]:
        parts.append(f"added {', '.join(added)}")
    if retyped := [f"{f.name} {have[f.name].simpleString()} -> {f.dataType.simpleString()}" for f in source.fields
                   if f.name in have and have[f.name] != f.dataType]:
        parts.append(f"retyped {', '.join(retyped)}")
    if not parts and copied and now and copied != now:
        parts.append("not the columns its rows were copied with")
    return "; ".join(parts) or None


def check_fits(path: str, table: str, delta: "StructType", source: "StructType") -> None:
    """Refuse a source whose column has another type in the fan-in's Delta table: its rows
    cannot land there (TargetError naming the column). Columns the Delta table lacks are added
    by the copy; columns the source lacks are null in its rows."""
    have = {f.name: f.dataType for f in delta.fields}
    for f in source.fields:
        if f.name == SHARD:
            raise TargetError(f"{table} has a column named {SHARD}, which pgcdc keeps for a fan-in's shard; "
                              "rename it to land the table in a fan-in")
        if f.name in have and have[f.name] != f.dataType:
            raise TargetError(f"column {f.name} of {table} is {f.dataType.simpleString()}, but {path} holds it as "
                              f"{have[f.name].simpleString()} for the fan-in's other sources: alter the sources "
                              "alike (every source of a fan-in has the same columns and types)")


def retype(spark: "SparkSession", path: str, types: "dict[str, DataType]") -> None:
    """Rewrite the fan-in's Delta table with its columns `types` names in those types, every
    shard's rows cast (a type every source now has: sync/copies.py), in one commit; the
    sources' states (txn actions, state files) stay as they are."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(path)
    rows = table.select(*[(F.col(spark_ident(c)).cast(types[c]) if c in types else F.col(spark_ident(c))).alias(c)
                          for c in table.columns])
    rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(SHARD).save(path)
