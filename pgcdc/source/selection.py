"""Which attached tables a consumer syncs: its `tables` setting, a list of names and patterns.

An entry is a table name (`billing.invoices`, or `invoices` on the search path), which must
be attached, or a pattern of a schema and a table part, each a shell-style glob matched
case-sensitively against the stored names (`app.*`, `*.orders`, `"Sales".q?_*`; unquoted
parts are folded to lower case as PostgreSQL folds identifiers). No entries means every
attached table. (A name holding *, ? or [ is listed as a pattern: `app.[*]odd`.) A table
joins a consumer only if one of its entries takes it in; the run records the entries in
pgcdc.consumer so that `pgcdc status` can say, per consumer, which table it should sync
but does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

import psycopg

from pgcdc.errors import ConfigError, TableError
from pgcdc.source.capture import AttachedTable, list_attached, resolve_table

_GLOB = frozenset("*?[")


@dataclass(frozen=True)
class Pattern:
    """A `tables` entry with glob characters: a schema part and a table part."""

    text: str
    schema: str
    table: str

    def takes(self, schema: str, table: str) -> bool:
        return fnmatchcase(schema, self.schema) and fnmatchcase(table, self.table)


def _parts(entry: str) -> list[tuple[str, bool]]:
    """`entry` split at its dots outside double quotes: (part, quoted) each."""
    parts: list[tuple[str, bool]] = []
    current, quoted, inside, i = "", False, False, 0
    while i < len(entry):
        ch = entry[i]
        if ch == '"':
            if inside and entry[i + 1:i + 2] == '"':
                current += '"'
                i += 1
            else:
                inside = not inside
                quoted = True
        elif ch == "." and not inside:
            parts.append((current, quoted))
            current, quoted = "", False
        else:
            current += ch
        i += 1
    if inside:
        raise ConfigError(f"`tables` entry {entry!r} has an unclosed double quote")
    parts.append((current, quoted))
    return parts


def pattern(entry: str) -> Pattern | None:
    """The pattern an entry is, or None for a plain table name; ConfigError if malformed."""
    if not _GLOB & set(entry):
        return None
    parts = _parts(entry.strip())
    if len(parts) != 2 or not all(part for part, _ in parts):
        raise ConfigError(f"`tables` pattern {entry!r} must be schema.table, each part a name or a glob "
                          "(e.g. app.* or *.orders)")
    (schema, sq), (table, tq) = parts
    return Pattern(entry, schema if sq else schema.lower(), table if tq else table.lower())


def stored_names(conn: psycopg.Connection) -> dict[int, tuple[str, str]]:
    """table_id -> (schema, table) as stored (unquoted) for every attached table."""
    rows = conn.execute("select a.table_id, n.nspname, c.relname from pgcdc.attached a "
                        "join pg_class c on c.oid = a.relid join pg_namespace n on n.oid = c.relnamespace").fetchall()
    return {table_id: (schema, table) for table_id, schema, table in rows}


def taken(entries: list[str], attached: list[AttachedTable], names: dict[int, tuple[str, str]]) -> list[AttachedTable]:
    """The attached tables `entries` take in (canonical names for plain entries; every table
    for no entries), without checking that each entry takes one (`pgcdc status`)."""
    if not entries:
        return list(attached)
    patterns = [p for p in (pattern(e) for e in entries) if p is not None]
    plain = {e.strip() for e in entries if pattern(e) is None}
    return [t for t in attached
            if t.name in plain or (t.table_id in names and any(p.takes(*names[t.table_id]) for p in patterns))]


def canonical(conn: psycopg.Connection, entries: list[str]) -> list[str]:
    """The entries with each plain name in canonical form (schema-qualified, quoted as needed),
    as pgcdc.consumer records them: a name on the search path means the same to `status`."""
    return [e if pattern(e) is not None else resolve_table(conn, e) for e in entries]


def select_tables(conn: psycopg.Connection, entries: list[str]) -> list[AttachedTable]:
    """The attached tables a consumer with these `tables` entries syncs, by name. TableError
    for a name that is not attached, or a pattern that takes in no attached table."""
    attached = list_attached(conn)
    if not entries:
        return attached
    names = stored_names(conn)
    by_name = {t.name: t for t in attached}
    chosen: dict[str, AttachedTable] = {}
    for entry in entries:
        p = pattern(entry)
        if p is None:
            name = resolve_table(conn, entry)
            if name not in by_name:
                raise TableError(f"table {name} is listed in `tables` but not attached; run `pgcdc attach {name}`")
            chosen[name] = by_name[name]
            continue
        hits = [t for t in attached if p.takes(*names[t.table_id])]
        if not hits:
            raise TableError(f"`tables` pattern {entry} takes in no attached table of database {conn.info.dbname}; "
                             f"attach its tables (`pgcdc attach --schema {p.schema}`) or change the pattern "
                             "(`pgcdc list` lists the attached ones)")
        chosen.update((t.name, t) for t in hits)
    return sorted(chosen.values(), key=lambda t: t.name)
