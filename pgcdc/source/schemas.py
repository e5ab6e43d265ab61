"""Whole schemas: `pgcdc attach --schema` attaches every table of a schema that can be
captured and says why it refuses each other one; pgcdc.attached_schema remembers the schema
and its refused tables, so a table created there later and not attached is named by
`pgcdc status` and each run (`uncaptured`), never left out in silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from pgcdc.errors import TableError
from pgcdc.source import capture


@dataclass
class SchemaAttach:
    """What `attach --schema` did: tables attached now, already attached, refused (with why)."""

    schema: str
    attached: list[capture.AttachedTable] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    matched: set[str] = field(default_factory=set)  # the excluded columns some table of the schema has
    left_out: list[str] = field(default_factory=list)  # what the schema leaves out of its tables, now and later


def _schema_oid(conn: psycopg.Connection, schema: str) -> tuple[int, str]:
    """The schema's oid and canonical name; TableError naming it if there is none."""
    try:
        row = conn.execute("select to_regnamespace(%s)::oid", (schema,)).fetchone()
    except psycopg.Error:
        row = (None,)
    if row is None or row[0] is None:
        raise TableError(f"schema {schema} not found in database {conn.info.dbname}; check the name "
                         '(quote mixed case as "Name"; `\\dn` in psql lists the schemas)')
    name = conn.execute("select format('%%I', nspname) from pg_namespace where oid = %s", (row[0],)).fetchone()[0]
    return int(row[0]), name


def _tables(conn: psycopg.Connection, oid: int) -> list[tuple[int, str]]:
    """The schema's tables (ordinary and partitioned), as (oid, canonical name), by name; not
    partitions, which are captured with their partitioned table."""
    return [(int(r[0]), r[1]) for r in conn.execute(
        "select c.oid, format('%%I.%%I', n.nspname, c.relname) from pg_class c "
        "join pg_namespace n on n.oid = c.relnamespace where c.relnamespace = %s and c.relkind in ('r', 'p') "
        "and not c.relispartition order by c.relname", (oid,))]


def _column_names(conn: psycopg.Connection, rel: int) -> set[str]:
    return {r[0] for r in conn.execute("select attname::text from pg_attribute where attrelid = %s and attnum > 0 "
                                       "and not attisdropped", (rel,))}


def attach_schema(conn: psycopg.Connection, schema: str, exclude_columns: list[str] | None = None,
                  follow_new: bool = False) -> SchemaAttach:
    """Attach each table of `schema` not attached yet (one transaction each: a refusal undoes
    only that table), and remember the schema with the tables refused. `exclude_columns`: left
    out of every table of the schema, now and later (docs/columns.md), with what the schema
    leaves out already: remembered first, so that pgcdc.attach keeps it for each table (a table
    attached alone later too). `follow_new`: a table created there later is attached by itself
    (pgcdc.follow_new; once on, it stays on). A table dropped meanwhile is passed over."""
    capture.require_schema(conn)
    oid, name = _schema_oid(conn, schema)
    done = SchemaAttach(name)
    with conn.transaction():
        conn.execute("insert into pgcdc.attached_schema (schema_oid, exclude_columns, follow) values (%s, %s, %s) "
                     "on conflict (schema_oid) do update set exclude_columns = array(select distinct c from "
                     "unnest(pgcdc.attached_schema.exclude_columns || excluded.exclude_columns) c order by c), "
                     "follow = pgcdc.attached_schema.follow or excluded.follow",
                     (oid, sorted(set(exclude_columns or [])), follow_new))
    done.left_out = conn.execute("select exclude_columns from pgcdc.attached_schema where schema_oid = %s",
                                 (oid,)).fetchone()[0]
    left_out = set(done.left_out)
    attached = {t.name: t for t in capture.list_attached(conn)}
    refused: list[int] = []
    for rel, table in _tables(conn, oid):
        present = left_out & _column_names(conn, rel)
        done.matched.update(present)
        t = attached.get(table)
        try:
            if t is None:
                done.attached.append(capture.attach(conn, table))
            elif t.column_mode == "except" and left_out <= set(t.chosen or []) or not left_out:
                done.already.append(table)
            elif t.column_mode == "only" and present:
                raise TableError(f"{table} is attached with --columns {', '.join(t.chosen or [])}: attach it on its "
                                 "own with the columns it should keep")
            else:  # attached already: it leaves these out too, its other options as they are
                done.attached.append(capture.attach(
                    conn, table, key=t.key_columns, predicate=t.predicate, shard=t.shard, into=t.into,
                    delta_partition_by=t.delta_partition_by,
                    columns=t.chosen if t.column_mode == "only" else None,
                    exclude_columns=[c for c in t.chosen or [] if c in _column_names(conn, rel)]
                    if t.column_mode == "except" else None))
        except (TableError, psycopg.Error) as exc:
            if _gone(conn, rel):  # (dropped since it was listed: nothing to capture, nothing to name)
                continue
            if not isinstance(exc, TableError):
                raise
            done.refused.append((table, str(exc)))
            refused.append(rel)
    conn.execute("update pgcdc.attached_schema set refused = %s, attached_at = now() where schema_oid = %s",
                 (refused, oid))
    return done


def _gone(conn: psycopg.Connection, rel: int) -> bool:
    """Whether the table was dropped (or moved out of the schema: attach names it not found)."""
    return conn.execute("select to_regclass(%s::oid::regclass::text) is null", (rel,)).fetchone()[0] is not False


def follow_new(conn: psycopg.Connection) -> list[str]:
    """Attach the tables created since in schemas attached with --follow-new (pgcdc.follow_new):
    'attached <table>' or 'refused <table>: <why>' lines; none where no schema is followed."""
    if not conn.execute("select exists (select 1 from pgcdc.attached_schema where follow)").fetchone()[0]:
        return []
    with conn.transaction():
        return [r[0] for r in conn.execute("select pgcdc.follow_new()").fetchall()]


def uncaptured(conn: psycopg.Connection) -> list[tuple[str, str, list[str], bool]]:
    """(table, schema, the names the schema leaves out, whether the schema is followed) for each
    table of a schema attached whole that is neither attached nor among the tables attach refused
    there: created (or moved there) since (in a followed schema: one that could not be attached)."""
    return conn.execute(
        "select format('%I.%I', n.nspname, c.relname), format('%I', n.nspname), s.exclude_columns, s.follow "
        "from pgcdc.attached_schema s "
        "join pg_namespace n on n.oid = s.schema_oid join pg_class c on c.relnamespace = s.schema_oid "
        "where c.relkind in ('r', 'p') and not c.relispartition and not c.oid = any(s.refused) "
        "  and not exists (select 1 from pgcdc.attached a where a.relid = c.oid) order by 1").fetchall()


def uncaptured_problems(conn: psycopg.Connection) -> list[str]:
    """`uncaptured` as the lines `pgcdc status` and a run give."""
    return [f"table {table} in schema {schema} (followed: new tables are attached by themselves) is not captured: "
            f"pgcdc could not attach it; run `pgcdc attach {table}` to see why, and fix that" if follow else
            f"table {table} in schema {schema} (attached with --schema) is not captured: it came after the schema "
            f"was attached; run `pgcdc attach --schema {schema}` (or `pgcdc attach {table}`"
            + (f", which leaves out {', '.join(left_out)} as the schema does)" if left_out else ")")
            for table, schema, left_out, follow in uncaptured(conn)]


def detach_schema(conn: psycopg.Connection, schema: str) -> list[str]:
    """Detach every attached table of `schema` and stop watching it; the tables detached."""
    oid, _ = _schema_oid(conn, schema)
    inside = {name for _, name in _tables(conn, oid)}
    names = [t.name for t in capture.list_attached(conn) if t.name in inside]
    for name in names:
        capture.detach(conn, name)
    conn.execute("delete from pgcdc.attached_schema where schema_oid = %s", (oid,))
    return names
