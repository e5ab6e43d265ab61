"""Catalog names: with `[target] database = "lake"` each synced table is also registered in
the Spark session's catalog as `lake.<schema>_<table>` (an external table over its Delta
folder), so users query it by name.

The name is the PostgreSQL schema and table joined by `_`, in lower case (metastores keep
names in lower case); a name with another character than a-z, 0-9 and `_` is refused, and
so is a name another table's folder holds already (`public.a_b` and `public_a.b` both map to
`public_a_b`), each naming the way out. Registration reads the Delta table's own schema:
nothing about the data changes, and a copy with new columns shows them under the same name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pgcdc.errors import TargetError
from pgcdc.lake.paths import spark_ident, split_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def catalog_name(database: str, table: str) -> str:
    """`database.schema_table` for the PostgreSQL table `table` (schema-qualified, as pgcdc names it)."""
    schema, table_name = split_name(table)
    name = f"{schema}_{table_name}".lower()
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise TargetError(f"{table} cannot be registered as {database}.{name}: catalog names take a-z, 0-9 and _ "
                          "only; rename the table, or sync it without [target] database")
    return f"{database.lower()}.{name}"


def register(spark: "SparkSession", database: str, table: str, path: str) -> str | None:
    """Register the Delta table at `path` as the catalog name of `table`; the name if this call
    registered it, None if it was already. TargetError if that name is another folder's."""
    name = catalog_name(database, table)
    db, short = name.split(".")
    spark.sql(f"create database if not exists {spark_ident(db)}")
    if spark.catalog.tableExists(f"{db}.{short}"):
        location = _location(spark, name)
        if location.rstrip("/") != _qualified(spark, path).rstrip("/"):
            raise TargetError(f"catalog table {name} already points at {location}, not at {path} ({table}); drop it "
                              f"(DROP TABLE {name}) if it is stale, or set another [target] database")
        return None
    spark.sql(f"create table if not exists {spark_ident(db)}.{spark_ident(short)} using delta "
              f"location '{path.replace(chr(39), chr(92) + chr(39))}'")
    return name


def _location(spark: "SparkSession", name: str) -> str:
    rows = spark.sql(f"describe table extended {name}").collect()
    return next((str(r[1]) for r in rows if str(r[0]).strip() == "Location"), "")


def _qualified(spark: "SparkSession", path: str) -> str:
    """`path` as the catalog writes a location (a local path as file:/...)."""
    hpath = spark._jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
    fs = hpath.getFileSystem(spark._jsc.hadoopConfiguration())
    return str(fs.makeQualified(hpath).toString())
