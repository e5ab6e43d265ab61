"""What rows that existed before a column was added hold in it, from PostgreSQL's catalog alone
(lake/evolve.py changes the Delta table in place from it, without reading the table's rows).

ADD COLUMN with no default leaves NULL in every existing row and no default behind; one with a
default that needs no rewrite (a constant, or a stable expression evaluated once) stores the
value existing rows read as (pg_attribute.attmissingval, atthasmissing) until the table is
rewritten. A column with a default but no stored value (the table was rewritten since, or the
default was set later) could hold anything: unknown, so the table is copied. A volatile
default makes PostgreSQL rewrite the table, which the DDL guard turns into a copy anyway."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from pgcdc.source.columns import Column, _lit
from pgcdc.source.enrich import _ident, read_queries, select_list

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pgcdc.source.capture import AttachedTable


def added_values(conn: psycopg.Connection, spark: "SparkSession", jdbc: dict[str, str], t: "AttachedTable",
                 columns: list[Column], added: list[int]) -> dict[int, tuple[bool, Any]]:
    """For each column numbered in `added` (of `columns`, the table's as the sync reads them):
    what the rows that existed before it was added hold in it. A stored value is read through
    the same JDBC path as the rows (one row), so it lands as a row's value would. Each: whether
    it is known, and the value (None: NULL)."""
    facts = conn.execute("select attnum, atthasmissing, atthasdef from pg_attribute "
                         "where attrelid = %s::regclass and attnum = any(%s)", (t.name, added)).fetchall()
    by_num = {c.attnum: c for c in columns}
    found: dict[int, tuple[bool, Any]] = {}
    stored: list[Column] = []
    for attnum, missing, has_default in facts:
        c = by_num[attnum]
        if missing and not c.is_array and not c.user_type:  # (a user's type: its input function is a user's code)
            stored.append(c)
        else:
            found[attnum] = (not missing and not has_default, None)
    if stored:
        keys = [c for c in columns if c.name in t.key_columns]
        values = ", ".join([f"null::{c.type_sql} as {_ident(c.name)}" for c in keys]
                           + [f"(select (a.attmissingval::text::{c.type_sql}[])[1] from pg_catalog.pg_attribute a "
                              f"where a.attrelid = {_lit(t.name)}::regclass and a.attnum = {int(c.attnum)}) as {_ident(c.name)}"
                              for c in stored])
        query = f"select {select_list(keys + stored, 'src', t)} from (select {values}) src"
        row = read_queries(spark, jdbc, t, keys + stored, [query]).collect()[0]
        found |= {c.attnum: (True, row[c.name]) for c in stored}
    return found


def rewrites_seen(conn: psycopg.Connection) -> bool:
    """Whether a rewrite of an attached table by ALTER TABLE is queued as a copy (the DDL guard's
    event trigger pgcdc_rewrite exists and is on)."""
    return bool(conn.execute("select exists (select 1 from pg_catalog.pg_event_trigger "
                             "where evtname = 'pgcdc_rewrite' and evtenabled <> 'D')").fetchone()[0])
