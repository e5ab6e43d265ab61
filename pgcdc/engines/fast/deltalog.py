"""What the fast engine's transaction needs from the Delta log (the consumer's txn version,
the file list), read from the version's checksum (`_delta_log/<version>.crc`) when it has them.

Delta 4.0 writes both into the checksum of every commit it makes (the file list while
the table has fewer than `spark.databricks.delta.allFilesInCrc.thresholdNumFiles`
files) but reads them only through a "state reconstruction": a Spark job over the
checkpoint and the commits since, 0.5-1.5 s per new table version on a laptop, which
is most of the cost of a small batch. A missing or partial checksum (written by
another tool, or a table with many files) falls back to that job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgcdc.spark.jvm import cls, none, optional, seq

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Opened:
    """A transaction on a table and what a batch asks of the table, each read once (a Py4J
    round trip per step, ~25 a batch when each function asked for itself): its metadata and
    protocol actions (JSON), its data path's URI scheme (None or "file": a local folder) and
    path, and the version's checksum (None where it has none)."""

    txn: Any
    metadata: dict[str, Any]
    protocol: dict[str, Any]
    scheme: str | None
    table_dir: str
    checksum: Any | None

    @staticmethod
    def of(spark: "SparkSession", path: str) -> "Opened":
        txn = cls(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path).startTransaction()
        uri = txn.deltaLog().dataPath().toUri()
        return Opened(txn, json.loads(txn.metadata().json())["metaData"], json.loads(txn.protocol().json())["protocol"],
                      uri.getScheme(), uri.getPath(), optional(txn.snapshot().checksumOpt()))

    def config(self, name: str, default: str = "") -> str:
        """A table property, as the metadata action holds it."""
        return str((self.metadata.get("configuration") or {}).get(name, default))

    def renames_columns(self) -> bool:
        """True if the table uses column mapping: its Parquet files then name the columns
        otherwise than its schema, so they can only be read through Delta."""
        return self.config("delta.columnMapping.mode", "none") != "none"

    def physical_names(self, columns: list[str]) -> list[str]:
        """The names `columns` are stored under in the table's Parquet files and file statistics: their
        own, or with column mapping the physical name Delta keeps for each (a column renamed keeps
        its old one; one that existed before mapping was turned on, its name then)."""
        if not self.renames_columns():
            return list(columns)
        fields = {f["name"]: f for f in json.loads(self.metadata["schemaString"])["fields"]}
        return [str(fields[c].get("metadata", {}).get("delta.columnMapping.physicalName", c)) for c in columns]


def _checksum_field(checksum: Any | None, name: str) -> Any | None:
    """The field `name` (a Scala Option) of the checksum, unwrapped; None if absent."""
    return None if checksum is None else optional(getattr(checksum, name)())


def _version_in_checksum(checksum: Any | None, app_id: str) -> int | None:
    """`app_id`'s txn version as the checksum lists it (-1 if absent); None if it lists none."""
    marks = _checksum_field(checksum, "setTransactions")
    if marks is None:
        return None
    for i in range(marks.size()):
        mark = marks.apply(i)
        if mark.appId() == app_id:
            return int(mark.version())
    return -1


def read_committed_version(o: Opened, app_id: str) -> int:
    """`committed_version` for a transaction, recorded as read: a concurrent commit of the
    same app id then makes this transaction's commit fail (as txn.txnVersion does)."""
    version = _version_in_checksum(o.checksum, app_id)
    if version is None:
        return int(o.txn.txnVersion(app_id))
    o.txn.readTxn().addOne(app_id)
    return version


def read_all_files(o: Opened) -> Any:
    """Every file of the transaction's snapshot (a Scala Seq of AddFile), recorded as read
    in full: a concurrent commit that removes or rewrites any file (OPTIMIZE, another
    writer's delete) makes this transaction's commit fail."""
    files = _checksum_field(o.checksum, "allFiles")
    if files is None:
        return o.txn.filterFiles()
    o.txn.readWholeTable()
    o.txn.trackFilesRead(files)
    return files


def files_overlapping(files: list[Any], column: str, low: int, high: int) -> list[Any]:
    """The files whose statistics say they may hold a `column` value in [low, high]
    (files without statistics for it are kept)."""
    kept = []
    for add in files:
        text = add.stats()
        stats = json.loads(text) if text else {}
        lo, hi = stats.get("minValues", {}).get(column), stats.get("maxValues", {}).get(column)
        if lo is None or hi is None or (int(lo) <= high and int(hi) >= low):
            kept.append(add)
    return kept


def stored_rows(spark: "SparkSession", o: Opened, files: list[Any], columns: list[str]) -> "DataFrame":
    """The given columns of every row stored in the files, deleted rows included, read as
    plain Parquet: for marking rows deleted, a row already marked changes nothing, and
    skipping it costs Delta's reader more than the scan itself. (A table with column
    mapping stores other names in its Parquet files: it is read through Delta.)"""
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    txn = o.txn
    if o.renames_columns():  # Delta's reader for just these files
        scan = txn.deltaLog().createDataFrame(txn.snapshot(), seq(spark, files), False, none(spark))
        return DataFrame(scan, spark).select(*columns)
    table = StructType.fromJson(json.loads(o.metadata["schemaString"]))
    schema = StructType([f for f in table.fields if f.name in columns])
    paths = [f.absolutePath(txn.deltaLog()).toString() for f in files]
    return spark.read.schema(schema).parquet(*paths)
