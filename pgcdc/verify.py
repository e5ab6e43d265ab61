"""`pgcdc verify`: compare each Delta table with its PostgreSQL table, row by row.

Exact only when nothing is written to the table meanwhile: the Delta table equals
PostgreSQL as of its watermark, not as of now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc import apply, enrich
from pgcdc.capture import AttachedTable

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Comparison:
    """Row counts on both sides and the rows only one side has."""

    table: str
    path: str
    postgres_rows: int
    delta_rows: int
    only_in_postgres: int
    only_in_delta: int

    @property
    def equal(self) -> bool:
        return self.only_in_postgres == 0 and self.only_in_delta == 0

    def line(self) -> str:
        if self.equal:
            return f"{self.table}: Delta equals PostgreSQL ({self.delta_rows} rows)"
        return (f"{self.table}: DIFFERENT: {self.only_in_postgres} rows only in PostgreSQL, {self.only_in_delta} only "
                f"in Delta ({self.postgres_rows} vs {self.delta_rows} rows); re-run `pgcdc ingest` once writes pause, "
                f"or `pgcdc resync {self.table}`")


def compare(spark: "SparkSession", conn: "psycopg.Connection", jdbc: dict[str, str], t: AttachedTable,
            path: str) -> Comparison:
    """Read both sides with the sync's column mapping and diff them (exceptAll both ways)."""
    columns = enrich.table_columns(conn, t.name)
    pg = enrich.read_table(spark, jdbc, t, columns, 1, 1).cache()
    delta = spark.read.format("delta").load(path)
    delta = delta.select(*[delta[c] for c in pg.columns]) if set(pg.columns) <= set(delta.columns) else delta
    try:
        return Comparison(t.name, path, pg.count(), delta.count(),
                          pg.exceptAll(delta).count(), delta.exceptAll(pg).count())
    finally:
        pg.unpersist()


def verify(spark: "SparkSession", conn: "psycopg.Connection", jdbc: dict[str, str], root: str,
           tables: list[AttachedTable]) -> list[Comparison]:
    return [compare(spark, conn, jdbc, t, apply.target_path(root, t.name)) for t in tables]
