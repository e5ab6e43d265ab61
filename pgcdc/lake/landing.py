"""What lands beside a table's columns (docs/columns.md).

- `[target] deletes = "soft"`: a deleted row stays in Delta with its last synced values,
  `_pgcdc_deleted = true` and `_pgcdc_deleted_at` (the time of the commit that saw it gone).
- `[target] metadata_columns = true`: every row holds `_pgcdc_synced_at` (the time of the
  commit that wrote it) and `_pgcdc_txid` (the greatest source txid among the changes to its
  key that the writing batch applied; a copy's rows, the copy's watermark).

Decided here alone: the columns pgcdc adds to a Delta table, the values a written row takes,
and how a copy keeps the rows it no longer finds (marked deleted, never dropped, never
overwritten with nulls). Both engines apply batches of such tables with these values: the
merge engine in its MERGE's clauses, the fast engine in the rows it writes (engines/fast/landed.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc.lake.paths import spark_ident

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField, StructType

    from pgcdc.settings import TargetSettings

DELETED = "_pgcdc_deleted"
DELETED_AT = "_pgcdc_deleted_at"
SYNCED_AT = "_pgcdc_synced_at"
TXID = "_pgcdc_txid"
NAMES = (DELETED, DELETED_AT, SYNCED_AT, TXID)
_OLD, _FOUND = "__pgcdc_old_", "__pgcdc_found"  # (a copy's join: the old rows' columns; a row the copy read)


def marked_deleted(frame: "DataFrame") -> "Column":
    """Whether each row of a Delta table's `frame` is marked deleted (never, where the table has no
    such column: soft deletes off)."""
    from pyspark.sql import functions as F

    if DELETED not in frame.columns:
        return F.lit(False)
    return F.coalesce(F.col(spark_ident(DELETED)), F.lit(False))


@dataclass(frozen=True)
class Landing:
    """The shape of the consumer's Delta tables beyond the source's columns."""

    soft_deletes: bool = False
    metadata: bool = False

    @classmethod
    def of(cls, target: "TargetSettings") -> "Landing":
        return cls(soft_deletes=target.deletes == "soft", metadata=target.metadata_columns)

    def fields(self) -> "list[StructField]":
        """The columns pgcdc adds, in order (none for a plain mirror)."""
        from pyspark.sql.types import BooleanType, LongType, StructField, TimestampType

        soft = [StructField(DELETED, BooleanType()), StructField(DELETED_AT, TimestampType())]
        meta = [StructField(SYNCED_AT, TimestampType()), StructField(TXID, LongType())]
        return (soft if self.soft_deletes else []) + (meta if self.metadata else [])

    def shape(self) -> str:
        """These columns' names, as a state's fingerprint of its columns records them
        (source/columns.fingerprint)."""
        return " ".join(f.name for f in self.fields())

    @staticmethod
    def every() -> "list[Landing]":
        """Every shape a consumer's Delta tables may take."""
        return [Landing(soft, meta) for soft in (False, True) for meta in (False, True)]

    def schema(self, source: "StructType") -> "StructType":
        """The Delta table's columns for rows read with the `source` schema."""
        from pyspark.sql.types import StructType

        return StructType([f for f in source.fields if f.name not in NAMES] + self.fields())

    def live_values(self, txid: "Column") -> "dict[str, Column]":
        """What pgcdc's columns hold in a row written from PostgreSQL's current row (inserted,
        updated, inserted again), whose key's changes reach up to `txid`."""
        from pyspark.sql import functions as F

        values = {DELETED: F.lit(False), DELETED_AT: F.lit(None).cast("timestamp")} if self.soft_deletes else {}
        return values | self._written(txid)

    def gone_values(self, txid: "Column") -> "dict[str, Column]":
        """What a batch sets in a row whose key PostgreSQL no longer has (soft deletes; the source's
        columns keep their last synced values)."""
        from pyspark.sql import functions as F

        return {DELETED: F.lit(True), DELETED_AT: F.current_timestamp()} | self._written(txid)

    def _written(self, txid: "Column") -> "dict[str, Column]":
        from pyspark.sql import functions as F

        return {SYNCED_AT: F.current_timestamp(), TXID: txid.cast("long")} if self.metadata else {}

    def live(self, rows: "DataFrame", txid: "Column") -> "DataFrame":
        """Rows read from PostgreSQL, with pgcdc's columns."""
        for name, value in self.live_values(txid).items():
            rows = rows.withColumn(name, value)
        return rows

    def copied(self, rows: "DataFrame", old: "DataFrame | None", keys: list[str], watermark: int) -> "DataFrame":
        """What a copy (whose watermark is `watermark`) writes where it replaces `old` (the Delta
        table's rows it replaces, or None for a new table) with `rows` (read from PostgreSQL): the
        rows, live, and, with soft deletes, each old row whose key the copy no longer finds, marked
        deleted; a row marked already stays as it was. Columns the old rows lack are null, and a
        column of another type takes the value Spark's try_cast gives (a copy that changes them).

        `rows` is read once, in one full outer join with `old`: a TRUNCATE is not MVCC-safe, so
        two reads of one snapshot can differ (rows, then none), and a row found by one read and
        missed by the other would be lost instead of marked."""
        from pyspark.sql import functions as F

        rows = self.live(rows, F.lit(watermark))
        if not self.soft_deletes or old is None:
            return rows
        names = {f.name for f in old.schema.fields}
        prior = old.select(*[F.col(spark_ident(n)).alias(_OLD + n) for n in old.columns])
        found = rows.withColumn(_FOUND, F.lit(True))
        joined = found.join(prior, on=[found[spark_ident(k)] == prior[spark_ident(_OLD + k)] for k in keys],
                            how="full_outer")
        marked = self._marked(names, rows.schema.fields, F.lit(watermark), _OLD)
        return joined.select(*[F.when(F.col(_FOUND).isNotNull(), F.col(spark_ident(f.name))).otherwise(m).alias(f.name)
                               for f, m in zip(rows.schema.fields, marked)])

    def marked(self, old: "DataFrame", fields: "list[StructField]", txid: "Column") -> "DataFrame":
        """Stored rows (`old`) whose keys PostgreSQL no longer has, as a batch writes them (soft
        deletes), with the columns `fields`: marked deleted (`gone_values(txid)`), their values
        kept; a row marked already stays as it was."""
        names = {f.name for f in old.schema.fields}
        return old.select(*[c.alias(f.name) for f, c in zip(fields, self._marked(names, fields, txid))])

    def _marked(self, names: set[str], fields: "list[StructField]", txid: "Column", prefix: str = "") -> "list[Column]":
        """The values of `fields` in an old row (columns `names`, read under `prefix` + name) marked
        deleted. Columns the old row lacks are null, a column of another type takes try_cast's value."""
        from pyspark.sql import functions as F

        def was(name: str, otherwise: "Column") -> "Column":
            """The old row's value if it was marked already, else `otherwise`."""
            if name not in names or DELETED not in names:
                return otherwise
            return F.when(F.col(spark_ident(prefix + DELETED)), F.col(spark_ident(prefix + name))).otherwise(otherwise)
        marked = self.gone_values(txid)
        values = []
        for f in fields:
            if f.name in marked:
                values.append(F.lit(True) if f.name == DELETED else was(f.name, marked[f.name]))
            elif f.name in names:
                values.append(F.expr(f"try_cast({spark_ident(prefix + f.name)} as {f.dataType.simpleString()})"))
            else:
                values.append(F.lit(None).cast(f.dataType))
        return values
