"""Copies in chunks (pgcdc/sync/chunked_copy.py): the key ranges a table is read in, each in a short
snapshot of its own, and the predicate that names the same range in its Delta table.

A chunk is the rows whose first key column lies in [lo, hi) (None: unbounded). PostgreSQL cuts
the ranges in its order of that column, walking an index that starts with it; Spark replaces the
Delta table's rows of the same range in its own order of the same values. So only columns whose
two orders agree are cut: integers, uuids (both order the bytes; Delta holds the lowercase text)
and text or varchar under the "C" collation (bytes in both). Other keys, and tables without such
an index, are copied in one snapshot (`cut_key` says why).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import psycopg
from psycopg import sql

from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column, unchanged
from pgcdc.source.enrich import select_list

Value = int | str


@dataclass(frozen=True)
class CutKey:
    """The column a table's copy is cut by, and how its values travel: "int" (Python int, Spark
    long) or "text" (compared by bytes on both sides; a uuid as its text)."""

    column: str
    kind: Literal["int", "text"]
    cast: str  # the PostgreSQL type a literal is cast to

    def pg(self, value: Value) -> str:
        """`value` as a PostgreSQL literal of the column's type."""
        if self.kind == "int":
            return str(int(value))
        return f"{sql.Literal(str(value)).as_string(None)}::{self.cast}"

    def spark(self, value: Value) -> str:
        """`value` as a Spark SQL literal, compared as the Delta table holds the column."""
        if self.kind == "int":
            return str(int(value))
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Chunk:
    """One chunk: keys in [lo, hi), read in `ranges` (sub-ranges, one JDBC share each)."""

    lo: Value | None
    hi: Value | None
    ranges: list[tuple[Value | None, Value | None]]
    rows: int  # keys the index holds in the range (rows the chunk reads, before the attach predicate)

    @property
    def last(self) -> bool:
        return self.hi is None


_KEY_FACTS = """
select t.typname, coalesce(co.collname, ''),
       co.oid = 100 and d.datlocprovider = 'c' and d.datcollate in ('C', 'POSIX', 'C.UTF-8', 'C.utf8'),
       exists (select 1 from pg_index i where i.indrelid = a.attrelid and i.indkey[0] = a.attnum and i.indpred is null
               and i.indexprs is null
               and (select am.amname from pg_class ic join pg_am am on am.oid = ic.relam where ic.oid = i.indexrelid)
                   = 'btree')
  from pg_attribute a join pg_type t on t.oid = a.atttypid
  left join pg_collation co on co.oid = a.attcollation
  cross join pg_database d
 where a.attrelid = %s::regclass and a.attname = %s and d.datname = current_database()
"""


def cut_key(conn: psycopg.Connection, t: AttachedTable, columns: list[Column]) -> tuple[CutKey | None, str]:
    """The column a copy of `t` can be cut by, or None and why not."""
    name = t.key_columns[0]
    column = next((c for c in columns if c.name == name), None)
    row = conn.execute(_KEY_FACTS, (t.name, name)).fetchone()
    if column is None or row is None:  # (renamed where no event trigger saw it: capture copies it whole)
        return None, f"its key column {name} is not among its columns"
    if column.is_array:
        return None, f"its key column {name} is an array"
    typname, collation, default_is_c, indexed = row
    if typname in ("int2", "int4", "int8"):
        key = CutKey(name, "int", "bigint")
    elif typname == "uuid":
        key = CutKey(name, "text", "uuid")
    elif typname in ("text", "varchar") and (collation in ("C", "POSIX") or default_is_c):
        key = CutKey(name, "text", typname)
    else:
        why = f"under collation {collation}" if typname in ("text", "varchar") else f"of type {typname}"
        return None, (f"its key column {name} is {why}, whose order Spark does not share (integers, uuids and "
                      "text under the \"C\" collation are cut into chunks)")
    if not indexed:
        return None, f"no btree index starts with its key column {name}"
    return key, ""


def next_chunk(conn: psycopg.Connection, t: AttachedTable, key: CutKey, lo: Value | None, rows: int,
               parts: int) -> Chunk:
    """The chunk from `lo` on: the next `rows` keys in index order (fewer: the last chunk, open
    above), cut into up to `parts` sub-ranges of about equal rows. Reads `rows` + 1 index entries
    in the connection's snapshot."""
    col = sql.Identifier(key.column).as_string(None)
    value = "a[i]" if key.kind == "int" else "a[i]::text"
    where = f"where src.{col} >= {key.pg(lo)}" if lo is not None else ""
    step = max(1, -(-rows // max(1, parts)))
    starts, after, count = conn.execute(
        f"with k as (select array(select src.{col} from {t.name} src {where} order by src.{col} limit {rows + 1}) a) "
        f"select array(select {value} from k, generate_series(1, least(cardinality(a), {rows}), {step}) i), "
        f"(select {value.replace('[i]', f'[{rows + 1}]')} from k), (select least(cardinality(a), {rows}) from k)"
        ).fetchone()
    starts = [_typed(key, v) for v in starts or []]
    hi = None if after is None else _typed(key, after)
    if hi is not None and starts and hi == starts[0]:  # (more than `rows` rows share the first value)
        above, more = conn.execute(
            f"select (select min(src.{col}){'' if key.kind == 'int' else '::text'} from {t.name} src "
            f"where src.{col} > {key.pg(hi)}), (select count(*) from {t.name} src where src.{col} = {key.pg(hi)})"
            ).fetchone()
        hi, count = (None if above is None else _typed(key, above)), int(more)
    cuts: list[Value | None] = [lo]
    for v in starts[1:]:
        if (hi is None or v != hi) and v != cuts[-1]:
            cuts.append(v)
    cuts.append(hi)
    return Chunk(lo, hi, list(zip(cuts[:-1], cuts[1:])), int(count or 0))


def _typed(key: CutKey, value: object) -> Value:
    return int(str(value)) if key.kind == "int" else str(value)


def range_query(t: AttachedTable, columns: list[Column], key: CutKey, lo: Value | None, hi: Value | None) -> str:
    """The SQL reading the table's rows (its predicate's) with keys in [lo, hi)."""
    col = "src." + sql.Identifier(key.column).as_string(None)
    where = ([f"{col} >= {key.pg(lo)}"] if lo is not None else []) + [unchanged(t.table_id, columns)]
    if hi is not None:
        where.append(f"{col} < {key.pg(hi)}")
    if t.predicate:
        where.append(f"({t.predicate})")
    return f"select {select_list(columns, 'src', t)} from {t.name} src" + (f" where {' and '.join(where)}" if where else "")


def delta_where(key: CutKey, lo: Value | None, hi: Value | None) -> str | None:
    """The Delta table's rows of the range [lo, hi), as a Spark SQL predicate (None: every row)."""
    col = "`" + key.column.replace("`", "``") + "`"
    parts = ([f"{col} >= {key.spark(lo)}"] if lo is not None else []) + \
        ([f"{col} < {key.spark(hi)}"] if hi is not None else [])
    return " and ".join(parts) or None


def encode(value: Value | None) -> str | None:
    """A key value as the copy's progress keeps it (CopyProgress.after)."""
    return None if value is None else json.dumps(value)


def decode(text: str | None) -> Value | None:
    return None if text is None else json.loads(text)
