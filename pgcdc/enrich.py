"""Enrichment: read the current rows for a batch's keys from PostgreSQL through Spark JDBC.

The keys never pass through the driver: each JDBC read runs one query that takes
the batch's queue rows (Batch.filter_sql), unnests and decodes their keys and keeps
its hash share of them. Two reads per batch: the keys alone (every Delta row with
one of them is replaced or deleted) and the keys joined to the table (the rows to
write). A key without a current row (or whose row no longer matches the attach
predicate) is thus a delete.

Column types are mapped so nothing is lost on the way to Delta: types Spark's JDBC
reader maps exactly are read as they are; the rest (unconstrained or > 38 digit
numeric, uuid, json/jsonb, enums, intervals, network types, ...) are read as their
PostgreSQL text form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgcdc.capture import AttachedTable
from pgcdc.events import Batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

# Types Spark's PostgreSQL JDBC dialect maps without loss (numeric only with precision <= 38).
NATIVE = {"int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar", "date",
          "timestamp", "timestamptz", "bytea", "numeric"}
NATIVE_ELEMENTS = NATIVE - {"numeric", "bytea"}


@dataclass(frozen=True)
class Column:
    """One column of a source table, with how it is read."""

    name: str
    type_sql: str       # format_type(), qualified: used to decode keys
    base: str           # pg_type.typname of the type or, for arrays, of the element
    is_array: bool
    numeric_precision: int | None

    @property
    def native(self) -> bool:
        if self.is_array:
            return self.base in NATIVE_ELEMENTS
        if self.base == "numeric":
            return self.numeric_precision is not None and self.numeric_precision <= 38
        return self.base in NATIVE

    def select(self, expr: str, key: bool = False) -> str:
        """The SQL that reads this column (given as `expr`) in a Spark-safe form.

        A key stored as text must have one text per value, or equal keys (numeric 1.0 and
        1.00) would not match in Delta: numeric keys lose trailing zeros."""
        if self.native:
            return expr
        if key and self.base == "numeric" and not self.is_array:
            return f"pg_catalog.trim_scale({expr})::text"
        return f"({expr})::text[]" if self.is_array else f"({expr})::text"


def table_columns(conn: psycopg.Connection, table: str) -> list[Column]:
    """The table's live columns in order."""
    rows = conn.execute(
        "select a.attname, format_type(a.atttypid, a.atttypmod), "
        "coalesce(e.typname, t.typname), t.typcategory = 'A', "
        "case when coalesce(e.typname, t.typname) = 'numeric' and a.atttypmod >= 4 "
        "     then ((a.atttypmod - 4) >> 16) & 65535 end "
        "from pg_attribute a join pg_type t on t.oid = a.atttypid left join pg_type e on e.oid = t.typelem "
        "and t.typcategory = 'A' where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped "
        "order by a.attnum", (table,)).fetchall()
    return [Column(*row) for row in rows]


def _ident(name: str) -> str:
    return sql.Identifier(name).as_string(None)


def _select_list(columns: list[Column], alias: str, keys: list[str]) -> str:
    """Every column (of table alias `alias`) in a Spark-safe form; `keys` get the key form."""
    return ", ".join(f"{c.select(alias + '.' + _ident(c.name), c.name in keys)} as {_ident(c.name)}" for c in columns)


def _decode_key(t: AttachedTable, key: str) -> list[str]:
    """SQL expressions that turn the queue's text key `key` back into typed key columns."""
    if len(t.key_columns) == 1:
        return [f"({key})::{t.key_types[0]}"]
    return [f"(({key})::text[])[{i + 1}]::{typ}" for i, typ in enumerate(t.key_types)]


def _batch_keys(t: AttachedTable, batch: Batch, part: int, partitions: int) -> str:
    """A subquery `k` with the batch's distinct keys (typed key columns) in share `part` of `partitions`."""
    refs = [_ident(k) for k in t.key_columns]
    decoded = ", ".join(f"{expr} as {ref}" for expr, ref in zip(_decode_key(t, "u.k"), refs))
    # Shares are cut by the hash of the decoded key, not of its text: equal keys can be
    # queued in different text forms (numeric 1.0 and 1.00), and must meet in one share
    # for `distinct` to keep one of them (one key, one row).
    n = int(partitions)
    share = f"((hash_record(row({', '.join('k.' + r for r in refs)})) % {n}) + {n}) % {n} = {int(part)}"
    return (f"(select * from (select distinct {decoded} from pgcdc.commit_queue q "
            f"cross join lateral unnest(q.keys) u(k) where {batch.filter_sql('q')}) k where {share}) k")


def keys_query(t: AttachedTable, columns: list[Column], batch: Batch, part: int, partitions: int) -> str:
    """The SQL reading share `part` of the batch's keys, in the form the Delta table holds them."""
    keys = [c for c in columns if c.name in t.key_columns]
    return (f"select {_select_list(keys, 'k', t.key_columns)} "
            f"from {_batch_keys(t, batch, part, partitions)}")


def rows_query(t: AttachedTable, columns: list[Column], batch: Batch, part: int, partitions: int) -> str:
    """The SQL reading share `part` of the batch's current rows (keys without one are deletes)."""
    join = " and ".join(f"t.{r} = k.{r}" for r in (_ident(k) for k in t.key_columns))
    predicate = f" and ({t.predicate})" if t.predicate else ""
    return (f"select {_select_list(columns, 't', t.key_columns)} "
            f"from {_batch_keys(t, batch, part, partitions)} join {t.name} t on {join}{predicate}")


def copy_query(t: AttachedTable, columns: list[Column], lo_page: int, hi_page: int | None) -> str:
    """The SQL reading the table's rows in pages [lo_page, hi_page) (open-ended if None): a TID range scan."""
    where = [f"src.ctid >= '({int(lo_page)},0)'::tid"]
    if hi_page is not None:
        where.append(f"src.ctid < '({int(hi_page)},0)'::tid")
    if t.predicate:
        where.append(f"({t.predicate})")
    return f"select {_select_list(columns, 'src', t.key_columns)} from {t.name} src where {' and '.join(where)}"


def _read(spark: "SparkSession", jdbc: dict[str, str], queries: list[str], snapshot: str | None = None) -> "DataFrame":
    """Union of one single-partition JDBC read per query: each query is read by its own task,
    with its own connection, so every share can carry its own pushed-down filter.

    With `snapshot` (from pg_export_snapshot()), every connection reads in that one snapshot.
    """
    props = dict(jdbc) | {"fetchsize": "10000", "preferTimestampNTZ": "true"}
    if snapshot is not None:
        if not re.fullmatch(r"[0-9A-F-]+", snapshot):
            raise ValueError(f"not a snapshot id: {snapshot!r}")
        props["sessionInitStatement"] = (f"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
                                         f"SET TRANSACTION SNAPSHOT '{snapshot}'")
    url = props.pop("url")
    frames = [spark.read.jdbc(url, f"({q}) pgcdc_q", properties=props) for q in queries]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def key_bounds(conn: psycopg.Connection, t: AttachedTable, batch: Batch) -> tuple[int, int] | None:
    """Lowest and highest key of the batch for a one-column integer key, else None.

    Read from the queue in PostgreSQL (no Spark job); the apply step uses them so Delta can
    skip files whose key range lies outside the batch (changes to recent rows).
    """
    if len(t.key_columns) != 1 or t.key_types[0] not in ("smallint", "integer", "bigint"):
        return None
    lo, hi = conn.execute(f"select min(u.k::bigint), max(u.k::bigint) from pgcdc.commit_queue q "
                          f"cross join lateral unnest(q.keys) u(k) where {batch.filter_sql('q')}").fetchone()
    return None if lo is None else (int(lo), int(hi))


def read_batch(spark: "SparkSession", jdbc: dict[str, str], t: AttachedTable, columns: list[Column],
               batch: Batch, partitions: int) -> tuple["DataFrame", "DataFrame"]:
    """The batch's keys and its keys' current rows, each read in parallel shares."""
    keys = _read(spark, jdbc, [keys_query(t, columns, batch, p, partitions) for p in range(partitions)])
    rows = _read(spark, jdbc, [rows_query(t, columns, batch, p, partitions) for p in range(partitions)])
    return keys, rows


def read_table(spark: "SparkSession", jdbc: dict[str, str], t: AttachedTable, columns: list[Column],
               partitions: int, relpages: int, snapshot: str | None = None) -> "DataFrame":
    """Every row of the table, read as `partitions` page (ctid) ranges.

    Pass the exported `snapshot` whenever partitions > 1: an UPDATE committed between two
    partitions' reads can move a row from a page range not read yet to one already read
    (the row would be missed) or the other way round (it would be copied twice). In one
    snapshot every row is read exactly once. The last range is open-ended.
    """
    step = max(1, -(-max(relpages, 1) // partitions))
    bounds: list[int | None] = [p * step for p in range(partitions)]
    return _read(spark, jdbc, [copy_query(t, columns, lo, hi) for lo, hi in zip(bounds, bounds[1:] + [None])],
                 snapshot)


def schema_of(spark: "SparkSession", jdbc: dict[str, str], t: AttachedTable, columns: list[Column]) -> "StructType":
    """The table's Spark schema as the sync reads it (to create the Delta table)."""
    return _read(spark, jdbc, [f"select {_select_list(columns, 'src', t.key_columns)} from {t.name} src where false"]).schema
