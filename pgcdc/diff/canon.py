"""One canonical text per value, on each side, for `pgcdc verify`: PostgreSQL's by SQL from each
value, keyed by its PostgreSQL type and following docs/types.md; Delta's by Spark SQL, keyed
by the Delta type. Code of verify's own, not the sync's reading (pgcdc/source/columns.py): a
mapping that changed values on the way shows as a difference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql.types import DataType

LAST_MICROS = "294247-01-10 04:00:54.775807"  # the latest timestamp Delta holds (docs/types.md)


# --- PostgreSQL's side --------------------------------------------------------------------------

def pg_value(expr: str, base: str, precision: int | None, key: bool) -> str:
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


def pg_typed(text: str, base: str, type_sql: str) -> str | None:
    """SQL turning a key column's canonical text (pg_value's, given as `text`) back into its value
    of type `type_sql` (format_type), or None where pgcdc does not: a type someone created (its
    input function is its owner's code)."""
    if base.startswith("user:"):
        return None
    if base == "date":
        return f"(date '1970-01-01' + ({text})::int4)"
    if base in ("timestamp", "timestamptz"):
        return f"({base} 'epoch' + ({text})::int8 * interval '1 microsecond')"
    if base == "bytea":
        return f"decode({text}, 'hex')"
    return f"({text})::{type_sql}"


def pg_canon(ref: str, base: str, is_array: bool, precision: int | None, key: bool) -> str:
    if not is_array:
        return pg_value(ref, base, precision, key)
    # (Delta holds numeric and bytea elements as their text form)
    if base in ("numeric", "bytea"):
        element = "e::text"
    elif base.startswith("user:"):
        element = "case when e is not null then pg_catalog.format('%s', e) end"
    else:
        element = pg_value("e", base, None, False)
    return (f"case when {ref} is not null then '{{' || array_to_string(array(select coalesce(length(v) || ':' || v, "
            f"'N') from unnest({ref}) with ordinality u(e, o), lateral (select {element} v) x order by o), ',') "
            f"|| '}}' end")


def pg_framed(texts: list[str]) -> str:
    """SQL joining canonical texts so that no two different lists give one text."""
    return " || ".join(f"coalesce(length({t}) || ':' || {t}, 'N')" for t in texts) or "''"


def pg_columns(conn: "psycopg.Connection", table: str) -> list[tuple[str, str, bool, int | None]]:
    return conn.execute(
        # (a type someone created is marked "user:": its text comes from its output function, never a cast)
        "select a.attname, case when coalesce(e.oid, t.oid) >= 16384 then 'user:' else '' end "
        "  || coalesce(e.typname, t.typname), t.typcategory = 'A', "
        "case when a.atttypmod >= 4 then ((a.atttypmod - 4) >> 16) & 65535 end "
        "from pg_attribute a join pg_type t on t.oid = a.atttypid "
        "left join pg_type e on e.oid = t.typelem and t.typcategory = 'A' "
        "where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped "
        "and a.attname::text = any(pgcdc.kept_columns(%s::regclass)) order by a.attnum",
        (table, table)).fetchall()


# --- Delta's side -------------------------------------------------------------------------------

def delta_value(ref: str, dt: "DataType") -> str:
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
        element = delta_value("e", dt.elementType)
        return (f"case when {ref} is not null then concat('{{', array_join(transform({ref}, e -> coalesce("
                f"concat(length({element}), ':', {element}), 'N')), ','), '}}') end")
    return f"cast({ref} as string)"


def spark_framed(texts: list[str]) -> str:
    return "concat(" + ", ".join(f"coalesce(concat(length({t}), ':', {t}), 'N')" for t in texts) + ")"


def row_hash(text: str) -> tuple[str, str]:
    """(PostgreSQL, Spark) SQL: a 60-bit hash of a row's canonical text."""
    return (f"('x' || lpad(substr(md5({text}), 1, 15), 16, '0'))::bit(64)::int8",
            f"cast(conv(substr(md5({text}), 1, 15), 16, 10) as bigint)")
