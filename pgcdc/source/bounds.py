"""A partition's rows found by its bound: the predicates that name the rows of a partition truncated
or dropped (its T event carries its description, sql/functions/partition_bounds.sql) in the
root table in PostgreSQL and in the Delta table, so that a run replaces those rows alone
(sync/partition_step.py) instead of copying the whole table.

PostgreSQL puts a row in a partition by comparing its key with the bound in the order of the
key's operator class; Spark compares the Delta table's values in its own order. Both agree
for integers, numerics, dates, timestamps, booleans, uuids (Delta holds their lowercase text),
and text compared as bytes (a "C" collation; any collation for a list's equality). Other keys
(floats, char(n), text under a linguistic collation in a range), expression keys and hash
partitioning have no predicate both sides share: `predicates` says why, and the run copies the
table as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgcdc.source.columns import Column

_MIN, _MAX = object(), object()  # MINVALUE, MAXVALUE in a range bound
_TOKEN = re.compile(r"\s*(?:'((?:[^']|'')*)'|(MINVALUE|MAXVALUE|NULL|true|false)|([-+0-9.eE]+))\s*(,|\))")
_INTS = {"int2", "int4", "int8"}
_RESTORE = {"date": "date_from_unix_date({})", "timestamptz": "timestamp_micros({})",
            "timestamp": "timestampadd(MICROSECOND, {}, TIMESTAMP_NTZ'1970-01-01 00:00:00')"}


@dataclass(frozen=True)
class Rows:
    """The rows of the partitions a batch truncated or dropped: `pg` (SQL over the root's columns
    as `src`) and `delta` (Spark SQL over the Delta table's), and the partitions' names."""

    pg: str
    delta: str
    names: list[str]


class Unbounded(Exception):
    """A partition whose rows no predicate both sides share can name (args[0]: why)."""


def _values(text: str) -> list[Any]:
    """The values of one parenthesized bound list (after its "("): str, None, _MIN or _MAX."""
    out: list[Any] = []
    pos = 0
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise Unbounded(f"a bound pgcdc cannot read ({text[:60]})")
        quoted, word, number, end = m.groups()
        out.append(quoted.replace("''", "'") if quoted is not None else
                   {"MINVALUE": _MIN, "MAXVALUE": _MAX, "NULL": None}.get(word, word) if word else number)
        pos = m.end()
        if end == ")":
            return out


def parse(bound: str) -> tuple[str, list[Any], list[Any]]:
    """A bound's kind ("default", "list", "range", "hash") and values (a list's; a range's lower
    and upper)."""
    if bound == "DEFAULT":
        return "default", [], []
    if bound.startswith("FOR VALUES IN ("):
        return "list", _values(bound[len("FOR VALUES IN ("):]), []
    m = re.match(r"FOR VALUES FROM \((.*)\) TO \((.*)\)$", bound)
    if m:
        return "range", _values(m.group(1) + ")"), _values(m.group(2) + ")")
    if bound.startswith("FOR VALUES WITH ("):
        return "hash", [], []
    raise Unbounded(f"a bound pgcdc cannot read ({bound[:60]})")


@dataclass(frozen=True)
class _Key:
    """One column of a partition key, with how its values compare on both sides."""

    column: Column
    by_bytes: bool

    def check(self, ordered: bool) -> None:
        c = self.column
        name = f"{c.name} ({c.type_sql})"
        if c.is_array or not (c.base in _INTS | {"date", "timestamp", "timestamptz", "bool", "uuid", "text", "varchar"}
                              or c.form() == "decimal"):
            raise Unbounded(f"its partition key column {name} compares in an order Spark does not share")
        if ordered and c.base in ("text", "varchar") and not self.by_bytes:
            raise Unbounded(f"its partition key column {name} is ranged under a linguistic collation, whose order "
                            "Spark does not share (text under the \"C\" collation is)")

    def pg(self) -> str:
        col = "src." + sql.Identifier(self.column.name).as_string(None)
        return f"{col} collate pg_catalog.\"C\"" if self.column.base in ("text", "varchar") else col

    def pg_value(self, text: str) -> str:
        return f"{sql.Literal(text).as_string(None)}::{self.column.type_sql}"

    def delta(self) -> str:
        return "`" + self.column.name.replace("`", "``") + "`"

    def delta_value(self, travelled: str) -> str:
        """A value as Spark SQL, from its travelling form's text (Column.select)."""
        c = self.column
        if c.base in _INTS:
            return str(int(travelled))
        if c.base in _RESTORE:
            return _RESTORE[c.base].format(int(travelled))
        if c.base == "bool":
            return "true" if travelled in ("true", "t") else "false"
        if c.form() == "decimal":
            return f"{travelled}BD"
        return "'" + travelled.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Side:
    """Builds one side's predicate (PostgreSQL's or Spark's) from parsed bounds."""

    def __init__(self, keys: list[_Key], values: dict[tuple[int, str], str], pg: bool):
        self.keys, self.values, self.pg = keys, values, pg

    def col(self, i: int) -> str:
        return self.keys[i].pg() if self.pg else self.keys[i].delta()

    def lit(self, i: int, text: str) -> str:
        return self.keys[i].pg_value(text) if self.pg else self.keys[i].delta_value(self.values[(i, text)])

    def listed(self, values: list[Any]) -> str:
        known = [v for v in values if v is not None]
        parts = [f"{self.col(0)} in ({', '.join(self.lit(0, v) for v in known)})"] if known else []
        if None in values:
            parts.append(f"{self.col(0)} is null")
        return "(" + " or ".join(parts) + ")" if parts else "false"

    def compare(self, bound: list[Any], above: bool) -> str:
        """Rows at or above the lower `bound` (`above`), or below the upper: PostgreSQL compares
        a range's key lexicographically, MINVALUE and MAXVALUE ending the comparison."""
        finite = []
        for v in bound:
            if v is _MIN or v is _MAX:
                break
            finite.append(v)
        rest = bound[len(finite)] if len(finite) < len(bound) else None
        # with every column finite: >= lower, < upper; a prefix before MINVALUE/MAXVALUE:
        # lower MINVALUE >=, lower MAXVALUE >, upper MAXVALUE <=, upper MINVALUE <
        if rest is None:
            last = ">=" if above else "<"
        else:
            last = {(True, True): ">=", (True, False): ">", (False, False): "<=", (False, True): "<"}[
                (above, rest is _MIN)]
        if not finite:
            return "true" if last in (">=", "<=") else "false"
        strict = ">" if above else "<"
        ors = []
        for i in range(len(finite)):
            eqs = [f"{self.col(j)} = {self.lit(j, finite[j])}" for j in range(i)]
            op = last if i == len(finite) - 1 else strict
            ors.append(" and ".join(eqs + [f"{self.col(i)} {op} {self.lit(i, finite[i])}"]))
        return "(" + " or ".join(f"({o})" for o in ors) + ")" if len(ors) > 1 else ors[0]

    def bound(self, text: str, strategy: str) -> str:
        kind, lower, upper = parse(text)
        if kind == "list":
            return self.listed(lower)
        if kind == "range":
            nulls = " and ".join(f"{self.col(i)} is not null" for i in range(len(self.keys)))
            return f"({nulls} and {self.compare(lower, True)} and {self.compare(upper, False)})"
        raise Unbounded("it is hash partitioned: no predicate names a hash partition's rows"
                        if kind == "hash" else f"a bound pgcdc cannot read ({text[:60]})")

    def level(self, level: dict[str, Any]) -> str:
        siblings = level["siblings"] or []
        if level["bound"] != "DEFAULT":
            return self.bound(level["bound"], level["strategy"])
        if level["strategy"] == "l":  # the values no sibling lists: NOT IN, which PostgreSQL prunes by
            listed = [v for b in siblings for v in parse(b)[1]]
            known = [v for v in listed if v is not None]
            rest = f"{self.col(0)} not in ({', '.join(self.lit(0, v) for v in known)})" if known else "true"
            return f"({self.col(0)} is not null and {rest})" if None in listed else \
                f"({self.col(0)} is null or {rest})"
        # a range's: the rows no sibling takes (a null key, whose sibling tests are null, too)
        tests = [f"coalesce({self.bound(b, level['strategy'])}, false)" for b in siblings]
        return f"not ({' or '.join(tests)})" if tests else "true"


def _keys(level: dict[str, Any], by_number: dict[int, Column]) -> list[_Key]:
    if level["strategy"] == "h":
        raise Unbounded("it is hash partitioned: no predicate names a hash partition's rows")
    if level["attnums"] is None:
        raise Unbounded("its partition key is an expression, which pgcdc does not evaluate in Delta")
    keys = []
    for n, by_bytes in zip(level["attnums"], level["bytes"]):
        column = by_number.get(n)
        if column is None:
            raise Unbounded(f"its partition key column (number {n}) is not among the columns its sync reads")
        key = _Key(column, bool(by_bytes))
        key.check(level["strategy"] == "r")
        keys.append(key)
    return keys


def _literals(level: dict[str, Any]) -> list[tuple[int, str]]:
    """(key position, literal text) of every value the level's bounds name."""
    found = []
    for text in [level["bound"]] + list(level.get("siblings") or []):
        kind, lower, upper = parse(text)
        for bound in ([lower] if kind == "list" else [lower, upper]):
            for i, v in enumerate(bound):
                if isinstance(v, str):
                    found.append((0 if kind == "list" else i, v))
    return found


def predicates(conn: psycopg.Connection, payloads: list[dict[str, Any]], columns: list[Column]) -> Rows:
    """The rows of the partitions the payloads describe (T events of partitions truncated or
    dropped), on both sides; raises Unbounded where a partition has none (then the table is copied).
    Values travel as the table's rows do (Column.select): PostgreSQL turns each bound's text into
    the number or text Delta holds, so both sides name the same rows."""
    by_number = {c.attnum: c for c in columns}
    # a partition truncated with its parent (TRUNCATE of a branch fires each of its tables'
    # triggers), or twice, is named by the parent's bound, or once
    oids = {str(p.get("oid")) for p in payloads}
    payloads = list({str(p.get("oid")): p for p in payloads
                     if not any(str(a) in oids for a in p.get("ancestors") or [])}.values())
    planned: list[tuple[list[tuple[dict[str, Any], list[_Key]]], str]] = []
    wanted: dict[tuple[int, str], tuple[_Key, str]] = {}
    for payload in payloads:
        levels = [(level, _keys(level, by_number)) for level in payload["levels"]]
        for level, keys in levels:
            for i, text in _literals(level):
                wanted[(keys[i].column.name, text)] = (keys[i], text)
        planned.append((levels, payload["partition"]))
    travelled = _travel(conn, list(wanted.values()))
    pg_parts, delta_parts = [], []
    for levels, _ in planned:
        pg_parts.append(" and ".join(_Side(keys, {}, True).level(level) for level, keys in levels))
        delta_parts.append(" and ".join(
            _Side(keys, {(i, t): travelled[(keys[i].column.name, t)] for i, t in _literals(level)}, False).level(level)
            for level, keys in levels))
    return Rows(" or ".join(f"({p})" for p in pg_parts), " or ".join(f"({p})" for p in delta_parts),
                [name for _, name in planned])


def _travel(conn: psycopg.Connection, values: list[tuple[_Key, str]]) -> dict[tuple[str, str], str]:
    """Each (key column, literal) as the text of the value its rows travel as (Column.select)."""
    if not values:
        return {}
    exprs = [f"({k.column.select(k.pg_value(text))})::text" for k, text in values]
    row = conn.execute(f"select array[{', '.join(exprs)}]::text[]").fetchone()
    out = {}
    for (k, text), value in zip(values, row[0]):
        if value is None:
            raise Unbounded(f"its bound {text} on {k.column.name} has no value in Delta (an infinity?)")
        out[(k.column.name, text)] = value
    return out
