"""What an engine is handed and what it must do (pgcdc/engines/__init__.py picks one): one
batch to apply (`BatchWork`), one small table's copy (`CopyWork`), and the `Engine` interface
both engines implement. A module of its own, so the engines import it and not the package that
chooses between them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from pgcdc.lake.landing import Landing
    from pgcdc.lake.target import Written
    from pgcdc.settings import IngestSettings
    from pgcdc.source.capture import AttachedTable
    from pgcdc.source.columns import Column
    from pgcdc.source.batch_read import BatchRead
    from pgcdc.source.events import Batch
    from pgcdc.source.snapshots import Held
    from pgcdc.watermark import ConsumerState


@dataclass
class BatchWork:
    """One batch to apply: what an engine needs to read its rows and commit them with `state`.
    `read`: the batch's JDBC read, planned when first used (it raises ColumnsChanged if the
    table's columns changed since the run checked them); `before_commit` runs once every row is
    read, right before the commit (it tells PostgreSQL's mirror a commit may land)."""

    spark: "SparkSession"
    path: str
    table: "AttachedTable"
    columns: "list[Column]"
    batch: "Batch"
    reader: "psycopg.Connection"
    row_bytes: float
    settings: "IngestSettings"
    state: "ConsumerState"
    read: "BatchRead"
    before_commit: Callable[[], None]
    landing: "Landing"
    snapshot: "Held | None" = None  # the pass's snapshot the batch's rows are read in (a cut), or None


@dataclass
class CopyWork:
    """A whole-table copy an engine may make itself: `rows` reads every row in the copy's
    snapshot (values in `schema`'s column order; None if psycopg has no Python value for
    one); `before_commit` runs right before the commit."""

    spark: "SparkSession"
    path: str
    rows: "Callable[[], list[tuple[Any, ...]] | None]"
    schema: "StructType"
    key_columns: list[str]
    state: "ConsumerState"
    before_commit: Callable[[], None]


class Engine(Protocol):
    name: str

    def apply(self, work: BatchWork) -> "Written":
        """Apply the batch in one Delta commit carrying `work.state`."""

    def copy(self, work: CopyWork) -> "Written | None":
        """Copy a small table in one commit carrying `work.state`, or None (nothing written):
        Spark's overwrite (copy_writes.overwrite) copies it."""

    def finish(self, path: str) -> None:
        """After a run's last batch of the table (its own files beside the table)."""
