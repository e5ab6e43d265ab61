"""`pgcdc verify`: compare each Delta table with its PostgreSQL table, independently of the sync.

Both sides are brought to one canonical text per value by code of this module's own, not
by the sync's reading (pgcdc/columns.py): PostgreSQL's side by SQL from each value, keyed by
its PostgreSQL type and following docs/types.md; Delta's side by Spark SQL, keyed by the
Delta type. A mapping that changed values on the way (a date moved, an infinity turned into
a plausible date) shows as a difference. Rows are hashed into buckets by key on both sides;
only the buckets whose row count or hash differ are compared row by row.

Exact only when nothing is written to the table meanwhile: the Delta table equals
PostgreSQL as of its watermark, not as of now.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import sql

from pgcdc import access, target
from pgcdc.capture import AttachedTable

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

ROWS_PER_BUCKET = 1000
MAX_BUCKETS = 65536
LAST_MICROS = "294247-01-10 04:00:54.775807"  # the latest timestamp Delta holds (docs/types.md)


@dataclass(frozen=True)
class Comparison:
    """Row counts on both sides and the rows only one side has (a row that differs counts on both)."""

    table: str
    path: str
    postgres_rows: int
    delta_rows: int
    only_in_postgres: int
    only_in_delta: int
    examples: list[str] = field(default_factory=list)  # keys of rows that differ
    columns: str | None = None  # how the column sets differ, if they do

    @property
    def equal(self) -> bool:
        return self.columns is None and self.only_in_postgres == 0 and self.only_in_delta == 0

    def line(self) -> str:
        if self.equal:
            return f"{self.table}: Delta equals PostgreSQL ({self.delta_rows} rows)"
        what = (f"columns differ ({self.columns})" if self.columns else
                f"{self.only_in_postgres} rows only in PostgreSQL, {self.only_in_delta} only in Delta "
                f"({self.postgres_rows} vs {self.delta_rows} rows; keys e.g. {', '.join(self.examples)})")
        return (f"{self.table}: DIFFERENT: {what}; re-run `pgcdc ingest` once writes pause, "
                f"or `pgcdc resync {self.table}`")


# --- PostgreSQL's side --------------------------------------------------------------------------

def _pg_value(expr: str, base: str, precision: int | None, key: bool) -> str:
    """SQL: the canonical text of a scalar value of type `base` (docs/types.md), null where Delta holds null."""
    if base in ("int2", "int4", "int8", "bool", "text", "varchar"):
        return f"({expr})::text"
    if base == "bpchar":
        # its output form, blank-padded (a cast to text would trim it); format() makes null ''
        return f"case when ({expr}) is not null then format('%s', {expr}) end"
    if base == "float4":
        return f"('x' || encode(float4send({expr}), 'hex'))::bit(32)::int4::text"
    if base == "float8":
        return f"('x' || encode(float8send({expr}), 'hex'))::bit(64)::int8::text"
    if base == "bytea":
        return f"encode({expr}, 'hex')"
    if base == "date":
        return f"case when isfinite({expr}) then (({expr}) - date '1970-01-01')::text end"
    if base in ("timestamp", "timestamptz"):
        last = sql.Literal(LAST_MICROS + ("+00" if base == "timestamptz" else "")).as_string(None)
        return (f"case when isfinite({expr}) and ({expr}) <= {last}::{base} "
                f"then (extract(epoch from {expr}) * 1000000)::int8::text end")
    if base == "numeric":
        if precision is None and not key:  # decimal(38,18)
            return (f"case when ({expr}) in ('NaN', 'Infinity', '-Infinity') then null "
                    f"else trim_scale(round({expr}, 18))::text end")
        if precision is None or precision > 38:  # exact text (a key: without trailing zeros)
            return f"trim_scale({expr})::text" if key else f"({expr})::text"
        return f"trim_scale(nullif({expr}, 'NaN'))::text"
    if base.startswith("user:"):
        return f"case when ({expr}) is not null then pg_catalog.format('%s', {expr}) end"
    return f"({expr})::text"


def _pg_canon(ref: str, base: str, is_array: bool, precision: int | None, key: bool) -> str:
    if not is_array:
        return _pg_value(ref, base, precision, key)
    # (Delta holds numeric and bytea elements as their text form)
    if base in ("numeric", "bytea"):
        element = "e::text"
    elif base.startswith("user:"):
        element = "case when e is not null then pg_catalog.format('%s', e) end"
    else:
        element = _pg_value("e", base, None, False)
    return (f"case when {ref} is not null then '{{' || array_to_string(array(select coalesce(length(v) || ':' || v, "
            f"'N') from unnest({ref}) with ordinality u(e, o), lateral (select {element} v) x order by o), ',') "
            f"|| '}}' end")


def _framed(texts: list[str]) -> str:
    """SQL joining canonical texts so that no two different lists give one text."""
    return " || ".join(f"coalesce(length({t}) || ':' || {t}, 'N')" for t in texts) or "''"


def _pg_columns(conn: "psycopg.Connection", table: str) -> list[tuple[str, str, bool, int | None]]:
    return conn.execute(
        # (a type someone created is marked "user:": its text comes from its output function, never a cast)
        "select a.attname, case when coalesce(e.oid, t.oid) >= 16384 then 'user:' else '' end "
        "  || coalesce(e.typname, t.typname), t.typcategory = 'A', "
        "case when a.atttypmod >= 4 then ((a.atttypmod - 4) >> 16) & 65535 end "
        "from pg_attribute a join pg_type t on t.oid = a.atttypid "
        "left join pg_type e on e.oid = t.typelem and t.typcategory = 'A' "
        "where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped order by a.attnum",
        (table,)).fetchall()


# --- Delta's side -------------------------------------------------------------------------------

def _delta_value(ref: str, dt: "DataType") -> str:
    """Spark SQL: the canonical text of a Delta value of type `dt` (as _pg_value gives it)."""
    from pyspark.sql import types as T

    if isinstance(dt, (T.FloatType, T.DoubleType)):  # the bits, as float4send/float8send give them
        bits = "'java.lang.Float', 'floatToIntBits'" if isinstance(dt, T.FloatType) else \
            "'java.lang.Double', 'doubleToLongBits'"
        return f"case when {ref} is not null then reflect({bits}, {ref}) end"
    if isinstance(dt, T.DecimalType):  # without trailing zeros, as trim_scale
        return f"regexp_replace(regexp_replace(cast({ref} as string), '(\\\\.[0-9]*[1-9])0+$', '$1'), '\\\\.0+$', '')"
    if isinstance(dt, T.BinaryType):
        return f"lower(hex({ref}))"
    if isinstance(dt, T.DateType):
        return f"cast(unix_date({ref}) as string)"
    if isinstance(dt, T.TimestampType):
        return f"cast(unix_micros({ref}) as string)"
    if isinstance(dt, T.TimestampNTZType):
        return f"cast(timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {ref}) as string)"
    if isinstance(dt, T.ArrayType):
        element = _delta_value("e", dt.elementType)
        return (f"case when {ref} is not null then concat('{{', array_join(transform({ref}, e -> coalesce("
                f"concat(length({element}), ':', {element}), 'N')), ','), '}}') end")
    return f"cast({ref} as string)"


def _spark_framed(texts: list[str]) -> str:
    return "concat(" + ", ".join(f"coalesce(concat(length({t}), ':', {t}), 'N')" for t in texts) + ")"


def _hash(text: str) -> tuple[str, str]:
    """(PostgreSQL, Spark) SQL: a 60-bit hash of a row's canonical text."""
    return (f"('x' || lpad(substr(md5({text}), 1, 15), 16, '0'))::bit(64)::int8",
            f"cast(conv(substr(md5({text}), 1, 15), 16, 10) as bigint)")


@dataclass(frozen=True)
class _Buckets:
    """How rows are grouped by key on both sides. A one-column integer key: key ranges, which
    both sides can read alone when comparing rows (PostgreSQL by its index, Delta skipping
    files by their statistics). Any other key: a hash of its canonical text."""

    pg: str                 # SQL (over table alias s): a row's bucket
    spark: str              # Spark SQL: the same
    key: str | None = None  # the integer key column (ranges), else None (hash)
    low: int = 0
    width: int = 1

    @staticmethod
    def of(conn: "psycopg.Connection", t: AttachedTable, key_types: list[str], pg_key: str, spark_key: str,
           rows: int) -> "_Buckets":
        count = max(1, min(MAX_BUCKETS, rows // ROWS_PER_BUCKET))
        if len(t.key_columns) == 1 and key_types[0] in ("int2", "int4", "int8"):
            key = t.key_columns[0]
            low, high = conn.execute(sql.SQL("select min({k}), max({k}) from {t}").format(
                k=sql.Identifier(key), t=sql.SQL(t.name))).fetchone()
            low, high = low or 0, high or 0
            width = max(1, -(-(high - low + 1) // count))
            ref = "`" + key.replace("`", "``") + "`"
            # (in numeric/decimal: key - low overflows a bigint for keys at both of its ends)
            return _Buckets(f"div(s.{sql.Identifier(key).as_string(None)}::numeric - ({low}), {width})",
                            f"floor((cast({ref} as decimal(38,0)) - ({low})) / {width})", key, low, width)
        return _Buckets(f"('x' || lpad(substr(md5({pg_key}), 1, 8), 16, '0'))::bit(64)::int8 % {count}",
                        f"cast(conv(substr(md5({spark_key}), 1, 8), 16, 10) as bigint) % {count}")

    def where(self, chosen: list[int], spark: bool) -> str:
        """A filter for the rows of the `chosen` buckets (PostgreSQL over alias s, or Spark)."""
        if self.key is None:
            listed = ", ".join(str(b) for b in chosen)
            return f"{self.spark} in ({listed})" if spark else f"{self.pg} in ({listed})"
        ref = "`" + self.key.replace("`", "``") + "`" if spark else f"s.{sql.Identifier(self.key).as_string(None)}"
        return " or ".join(f"({ref} >= ({self.low + b * self.width}) and {ref} < ({self.low + (b + 1) * self.width}))"
                           for b in chosen)


def compare(spark: "SparkSession", conn: "psycopg.Connection", t: AttachedTable, path: str) -> Comparison:
    """Compare the Delta table at `path` with PostgreSQL's table `t` (see the module docstring).
    Each step reads PostgreSQL (on a thread) while Spark reads Delta."""
    from pyspark.sql import functions as F

    access.check_readable(conn, t)
    delta = spark.read.format("delta").load(path)
    types = {f.name: f.dataType for f in delta.schema.fields}
    pg_cols = _pg_columns(conn, t.name)
    names = [c[0] for c in pg_cols]
    gone = [k for k in t.key_columns if k not in names]
    if gone:  # (a key renamed where no event trigger saw it: pgcdc.attached still has the old name)
        return Comparison(t.name, path, 0, 0, 0, 0, columns=f"key column {', '.join(gone)} is no longer a column of "
                                                            f"{t.name}; run `pgcdc attach {t.name}` first")
    if names != list(types):
        return Comparison(t.name, path, 0, 0, 0, 0, columns=f"PostgreSQL {', '.join(names)}; "
                                                            f"Delta {', '.join(types)}")

    def spark_ref(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    pg_texts = {n: _pg_canon(f"s.{sql.Identifier(n).as_string(None)}", base, arr, prec, n in t.key_columns)
                for n, base, arr, prec in pg_cols}
    spark_texts = {n: _delta_value(spark_ref(n), types[n]) for n in names}
    pg_key, pg_row = _framed([pg_texts[k] for k in t.key_columns]), _framed([pg_texts[n] for n in names])
    sp_key, sp_row = _spark_framed([spark_texts[k] for k in t.key_columns]), _spark_framed(list(spark_texts.values()))
    rows = conn.execute(f"select count(*) from {t.name}").fetchone()[0]
    buckets = _Buckets.of(conn, t, [next(c[1] for c in pg_cols if c[0] == k) for k in t.key_columns],
                          pg_key, sp_key, rows)
    pg_hash, sp_hash = _hash("r")
    predicate = f"({t.predicate})" if t.predicate else "true"

    def pg_rows(where: str) -> str:
        return f"select {pg_key} k, {pg_row} r, {buckets.pg} b from {t.name} s where {predicate} and ({where})"

    def keyed(rows: "DataFrame") -> "DataFrame":
        return rows.selectExpr(f"{sp_key} as k", f"{sp_row} as r", f"{buckets.spark} as b")

    with ThreadPoolExecutor(max_workers=1) as pool:
        pg_side: Future[dict[Any, tuple[Any, Any]]] = pool.submit(lambda: {b: (n, h) for b, n, h in conn.execute(
            f"select b, count(*), bit_xor({pg_hash}) from ({pg_rows('true')}) x group by 1")})
        delta_sums = {r.b: (r.n, r.h) for r in keyed(delta).groupBy("b").agg(
            F.count("*").alias("n"), F.expr(f"bit_xor({sp_hash})").alias("h")).collect()}
        pg_sums = pg_side.result()
        pg_total, delta_total = sum(n for n, _ in pg_sums.values()), sum(n for n, _ in delta_sums.values())
        differing = sorted(b for b in set(pg_sums) | set(delta_sums) if pg_sums.get(b) != delta_sums.get(b))
        if not differing:
            return Comparison(t.name, path, pg_total, delta_total, 0, 0)

        # row by row, in the buckets that differ
        def read_pg() -> dict[str, str]:
            found: dict[str, str] = {}
            for start in range(0, len(differing), 100):
                query = pg_rows(buckets.where(differing[start:start + 100], spark=False))
                found.update((k, r) for k, r, _ in conn.execute(query))
            return found
        pg_rows_side = pool.submit(read_pg)
        in_delta: dict[str, list[str]] = {}
        for r in keyed(delta.where(buckets.where(differing, spark=True))).select("k", "r").collect():
            in_delta.setdefault(r.k, []).append(r.r)
        in_pg = pg_rows_side.result()
    only_pg = [k for k, v in in_pg.items() if in_delta.get(k) != [v]]
    only_delta = [k for k, vs in in_delta.items() for v in vs if in_pg.get(k) != v or len(vs) > 1]
    examples = [_example(k, names, in_pg.get(k), in_delta.get(k, [None])[0])
                for k in sorted(set(only_pg) | set(only_delta))[:3]]
    return Comparison(t.name, path, pg_total, delta_total, len(only_pg), len(only_delta), examples)


def _values(framed: str) -> list[str | None]:
    """The values _framed joined (`3:abc1:7N` -> abc, 7, None)."""
    values: list[str | None] = []
    rest = framed
    while rest:
        if rest.startswith("N"):
            values.append(None)
            rest = rest[1:]
            continue
        length, _, rest = rest.partition(":")
        values.append(rest[:int(length)])
        rest = rest[int(length):]
    return values


def _example(key: str, names: list[str], pg: str | None, delta: str | None) -> str:
    """A differing row for people: its key and its first differing column, in canonical form."""
    shown = "/".join("null" if v is None else v for v in _values(key))
    if pg is None or delta is None:
        return f"{shown} (only in {'Delta' if pg is None else 'PostgreSQL'})"
    column = next(((n, a, b) for n, a, b in zip(names, _values(pg), _values(delta)) if a != b), None)
    if column is None:
        return f"{shown} (more than once in Delta)"
    return f"{shown} ({column[0]}: PostgreSQL {str(column[1])[:40]} vs Delta {str(column[2])[:40]})"


def verify(spark: "SparkSession", conn: "psycopg.Connection", root: str,
           tables: list[AttachedTable], consumer: str | None = None) -> list[Comparison]:
    """Compare each table with its Delta table: the consumer's (kept through renames,
    state.table_path), or <root>/<schema>.<table> when no consumer is named."""
    from pgcdc.state import table_path

    return [compare(spark, conn, t, table_path(conn, consumer, t.table_id, t.name, root)[0] if consumer
                    else target.target_path(root, t.name)) for t in tables]
