"""Source columns and how each type travels to Delta (docs/types.md), decided here alone.

Every value lands exactly, a value Delta's type has no room for lands by a documented rule
(infinity as null), or the table's read stops with an error naming the column and row
(pgcdc._unfit). Types Spark's JDBC reader maps exactly are read as they are; dates and
timestamps travel as numbers (days, microseconds since 1970) that Spark turns back into dates
and timestamps (the JDBC driver's java.sql conversions shift dates before 1582 and drop the
era of BC timestamps); the rest (numeric wider than 38 digits, uuid, json/jsonb, enums,
intervals, network types, ...) are read as their PostgreSQL text form.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import psycopg
from psycopg import sql

# Types Spark's PostgreSQL JDBC dialect maps without loss, as they are.
NATIVE = {"int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar", "bytea"}
NATIVE_ELEMENTS = NATIVE - {"bytea"}
TIMES = {"date", "timestamp", "timestamptz"}
# The latest timestamp Spark holds (microseconds since 1970 in a signed 64-bit number).
LAST_MICROS = "294247-01-10 04:00:54.775807"
UNCONSTRAINED_NUMERIC = "decimal(38,18)"


def _lit(text: str) -> str:
    return sql.Literal(text).as_string(None)


def as_text(expr: str) -> str:
    """SQL for a value's text from its type's output function, never a cast (docs/security.md);
    null stays null (format would make it '')."""
    return f"case when ({expr}) is not null then pg_catalog.format('%s', {expr}) end"


@dataclass(frozen=True)
class Column:
    """One column of a source table, with how it is read (docs/types.md)."""

    name: str
    type_sql: str       # format_type(), qualified: used to decode keys
    base: str           # pg_type.typname of the type or, for arrays, of the element
    is_array: bool
    numeric_precision: int | None
    user_type: bool = False  # a type (or element type) someone created: a cast of it may be a user's function
    attnum: int = 0     # its number in the table: a column renamed keeps it, one dropped and added again does not
    type_oid: int = 0   # its type (pg_attribute.atttypid, atttypmod): what a read's guard compares (`unchanged`)
    typmod: int = -1

    def form(self, key: bool = False) -> str:
        """How the column travels: "native" (as it is), "date"/"timestamp"/"timestamptz" (as a
        number, see the module docstring), "decimal" (numeric(p,s), p <= 38; NaN as null),
        "decimal38" (unconstrained numeric, rounded to 18 places) or "text" (its text form).
        A key must have one exact form per value: an unconstrained numeric key is text."""
        if self.base in TIMES:
            return self.base
        if self.base == "numeric" and not self.is_array:
            if self.numeric_precision is None:  # unconstrained
                return "text" if key else "decimal38"
            return "decimal" if self.numeric_precision <= 38 else "text"
        return "native" if self.base in (NATIVE_ELEMENTS if self.is_array else NATIVE) else "text"

    def select(self, expr: str, key: bool = False, table: str = "", row: str = "null") -> str:
        """The SQL that reads this column (given as `expr`) in its travelling form. A value
        with no exact form ends the read with pgcdc._unfit naming `table`, the column and
        the row's key (`row`, an SQL expression).

        A key stored as text must have one text per value, or equal keys (numeric 1.0 and
        1.00) would not match in Delta: numeric keys lose trailing zeros. A key never
        becomes null (infinity, NaN): it is refused."""
        form = self.form(key)

        def refuse(why: str, as_type: str) -> str:
            return (f"pgcdc._unfit({_lit(table)}, {_lit(self.name)}, {as_text(row)}, {as_text(expr)}, "
                    f"{_lit(why)})::{as_type}")

        if self.is_array:
            if form in TIMES:
                inner = f"array(select {replace(self, is_array=False).select('e')} " \
                        f"from unnest({expr}) with ordinality u(e, o) order by o)"
                typ = "int4[]" if form == "date" else "int8[]"
            else:
                inner, typ = (expr, self.type_sql) if form == "native" else \
                    (f"{self.text(expr)}::pg_catalog.text[]", "text[]")
            why = "Delta arrays are one-dimensional and start at 1; store such values in a jsonb or text column"
            return (f"case when ({expr}) is null then null when array_ndims({expr}) > 1 or array_lower({expr}, 1) <> 1 "
                    f"then {refuse(why, typ)} else {inner} end")
        if form in TIMES:
            number = f"({expr}) - date '1970-01-01'" if form == "date" else \
                f"(extract(epoch from {expr}) * 1000000)::int8"
            fits = f"isfinite({expr})" if form == "date" else \
                f"isfinite({expr}) and ({expr}) <= {_lit(LAST_MICROS + ('+00' if form == 'timestamptz' else ''))}" \
                f"::{form}"
            if key:  # (null: a gone row's key column, read beside the batch's key)
                why = f"a key must land exactly; Delta's {form} holds no infinity and no time after {LAST_MICROS}"
                return f"case when ({expr}) is null then null when {fits} then {number} else {refuse(why, 'int8')} end"
            return f"case when {fits} then {number} end"
        if form == "decimal":
            if key:
                nan = refuse('a key must land exactly; Delta decimals hold no NaN', 'numeric')
                return f"case when ({expr}) = 'NaN' then {nan} else {expr} end"
            return f"nullif({expr}, 'NaN')"
        if form == "decimal38":
            why = (f"an unconstrained numeric lands as {UNCONSTRAINED_NUMERIC}, which holds at most 20 digits before "
                   "the point; give the column a precision (numeric(p,s): up to 38 digits lands as a decimal, "
                   "more as exact text), then `pgcdc resync`")
            return (f"case when ({expr}) is null or ({expr}) in ('NaN', 'Infinity', '-Infinity') then null "
                    f"when abs(round({expr}, 18)) < 1e20 then round({expr}, 18) else {refuse(why, 'numeric')} end")
        if form == "text":
            if key and self.base == "numeric":
                return f"pg_catalog.trim_scale({expr})::text"
            return self.text(expr)
        return expr

    def text(self, expr: str) -> str:
        """The column's text form. A type someone created may have a cast to text of their own
        (casts are not looked up through search_path): its text comes from its output function
        (format), which no user can replace. Built-in types keep their cast (inet's shows the mask)."""
        return as_text(expr) if self.user_type else f"({expr})::text"

    def spark(self, name: str, key: bool = False) -> str:
        """The Spark SQL that turns this column as read (under `name`) into its Delta type."""
        ref = "`" + name.replace("`", "``") + "`"
        restore = {"date": "date_from_unix_date({})", "timestamptz": "timestamp_micros({})",
                   "timestamp": "timestampadd(MICROSECOND, {}, TIMESTAMP_NTZ'1970-01-01 00:00:00')"}.get(self.form(key))
        if restore is None:
            return ref
        value = f"transform({ref}, e -> {restore.format('e')})" if self.is_array else restore.format(ref)
        return f"{value} as {ref}"


def table_columns(conn: psycopg.Connection, table: str) -> list[Column]:
    """The table's live columns its sync reads, in order."""
    conn.execute("select %s::regclass", (table,))  # (a table that is gone fails here, naming it)
    return columns_of(conn, [table])[table]


def columns_of(conn: psycopg.Connection, tables: list[str]) -> dict[str, list[Column]]:
    """The live columns of each table that its sync reads (one query for all of a pass's tables):
    an attached table's column choice leaves the others out (pgcdc._kept, docs/columns.md), so no
    statement pgcdc sends names them. None for a table whose name does not resolve (dropped or
    renamed meanwhile)."""
    rows = conn.execute(
        "select k.name, a.attname, format_type(a.atttypid, a.atttypmod), "
        "coalesce(e.typname, t.typname), t.typcategory = 'A', "
        "case when coalesce(e.typname, t.typname) = 'numeric' and a.atttypmod >= 4 "
        "     then ((a.atttypmod - 4) >> 16) & 65535 end, "
        "coalesce(e.oid, t.oid) >= 16384, a.attnum, a.atttypid::int, a.atttypmod "
        "from unnest(%s::text[]) k(name) join pg_attribute a on a.attrelid = to_regclass(k.name) "
        "join pg_type t on t.oid = a.atttypid left join pg_type e on e.oid = t.typelem "
        "and t.typcategory = 'A' left join pgcdc.attached s on s.relid = a.attrelid "
        "where a.attnum > 0 and not a.attisdropped "
        "and (s.table_id is null or pgcdc._kept(s.column_mode, s.column_attnums, s.column_names, s.key_attnums, "
        "a.attnum, a.attname)) "
        "order by k.name, a.attnum", (tables,)).fetchall()
    found: dict[str, list[Column]] = {name: [] for name in tables}
    for name, *column in rows:
        found[name].append(Column(*column))
    return found


def numbers(columns: list[Column]) -> dict[str, int]:
    """Each column's number in its table, by name: what a Delta table records of its columns
    (lake/evolve.py), so that a rename is told from a drop and an add."""
    return {c.name: c.attnum for c in columns}


REWRITE_TRIES = 3  # reads made in all where a rewrite of the table overtook the snapshot (a chunk's, verify's)


def unchanged(table_id: int, columns: list[Column]) -> str:
    """A condition for a query reading the table's rows: true while the columns its sync reads are
    still `columns` (number, name, type and modifier), else it fails the query
    (pgcdc._columns_are, SQLSTATE 42703): rows read after a column change never land in a Delta
    table still of the old shape, which a change in place (lake/evolve.py) would then take for
    rows of the new one."""
    shape = ", ".join(_lit(f"{c.attnum}:{c.name}:{c.type_oid}:{c.typmod}") for c in columns)
    return f"pgcdc._columns_are({int(table_id)}, array[{shape}]::text[])"


def fingerprint(table: str, key: list[str], columns: list[Column], shape: str = "") -> str:
    """A short digest of a table's name, key and columns as the sync reads them, and the shape
    its Delta table lands in (`shape`, pgcdc's own columns: empty for a plain mirror): equal
    fingerprints mean a Delta table checked against the one still fits the other."""
    text = repr((table, tuple(key), tuple(columns))) + (f" {shape}" if shape else "")
    return hashlib.sha256(text.encode()).hexdigest()[:20]
