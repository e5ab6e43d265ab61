"""A batch's read: its keys with their current rows, over Spark JDBC (enrich.batch_query, cut into
shares by enrich.shares), planned when first asked for. What the run hands an engine, as data:
the engine reads through it and never calls back into the run."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column
from pgcdc.source.enrich import KEY_PREFIX, TXID, batch_query, jdbc_props, replayed_at_least, restored, shares
from pgcdc.source.events import Batch
from pgcdc.source.snapshots import import_statements

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class ColumnsChanged(Exception):
    """A batch read found the table's columns changed since its run checked them."""


@dataclass
class BatchRead:
    """A batch's keys with their current rows, read in `partitions` shares: each share in the
    exported `snapshot` (a pass's, source/snapshots.py) if given, else as they are then, once its
    connection has reached `replayed` (the WAL position of the standby the batch was planned on:
    enrich.replayed_at_least); with `txids`, each key's greatest txid too (enrich.batch_query).

    The rows' schema is the one the run checked the Delta table against (`known`). The JDBC
    relation is made on first use (Spark opens a connection to learn its columns, ~40 ms beside
    the batch's own reads; a small batch applied from the driver needs the schema alone); if its
    columns are not `known`'s (DDL since the run checked them), it raises ColumnsChanged.

    Each DataFrame is read on its own, and Spark pushes its columns and filter into the
    query: the keys read selects no row column, so PostgreSQL drops the join (the table's
    side is unique on the key); the rows read asks for a non-null key, which makes it an
    inner join."""

    spark: "SparkSession"
    jdbc: dict[str, str]
    t: AttachedTable
    columns: list[Column]
    batch: Batch
    partitions: int
    known: "StructType"
    txids: bool = False
    replayed: str | None = None
    snapshot: str | None = None

    @property
    def key_columns(self) -> list[str]:
        return list(self.t.key_columns)

    @property
    def schema(self) -> "StructType":
        return self.known

    @cached_property
    def frame(self) -> "DataFrame":
        if self.snapshot is not None:
            init = import_statements(self.snapshot)
        else:
            init = [replayed_at_least(self.replayed)] if self.replayed is not None else []
        url, props = jdbc_props(self.jdbc, *init)
        frame = self.spark.read.jdbc(url, f"({batch_query(self.t, self.columns, self.batch, self.txids)}) pgcdc_q",
                                     predicates=shares(self.t, self.partitions), properties=props)
        frame = restored(frame, self.columns, self.t.key_columns)
        if (changed := _differs(self.known, _rows_schema(frame))) is not None:
            raise ColumnsChanged(changed)
        return frame

    @cached_property
    def keys(self) -> "DataFrame":
        """The batch's keys, under the key columns' names."""
        from pyspark.sql import functions as F

        return self.frame.select(*[F.col(f"`{KEY_PREFIX + k}`").alias(k) for k in self.key_columns])

    @cached_property
    def rows(self) -> "DataFrame":
        """The batch's live rows."""
        from pyspark.sql import functions as F

        return self.frame.where(F.col(f"`{self.key_columns[0]}`").isNotNull()).select(
            *[f"`{f.name}`" for f in self.schema.fields])


def _rows_schema(frame: "DataFrame") -> "StructType":
    """A batch relation's schema without its key columns: the rows' columns."""
    from pyspark.sql.types import StructType

    return StructType([f for f in frame.schema.fields if not f.name.startswith(KEY_PREFIX) and f.name != TXID])


def _differs(known: "StructType", read: "StructType") -> str | None:
    """How the relation's columns differ from those the run checked, or None."""
    if [(f.name, f.dataType) for f in known.fields] == [(f.name, f.dataType) for f in read.fields]:
        return None
    return (f"PostgreSQL now gives {', '.join(f'{f.name} {f.dataType.simpleString()}' for f in read.fields)}; "
            f"the run checked {', '.join(f'{f.name} {f.dataType.simpleString()}' for f in known.fields)}")
