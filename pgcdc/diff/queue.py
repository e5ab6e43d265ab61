"""Keys that differ queued as changes: U events of the table, as capture writes them, so the
table's sync reads each key's row again and lands it as PostgreSQL holds it then (written where
it differs, deleted where PostgreSQL no longer has it). Exact under live writes: a queued key is
a change like any other, and one queued twice, or changed by the application meanwhile, still
lands as PostgreSQL holds it when its batch reads it."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgcdc.diff import canon
from pgcdc.diff.rows import framed_values
from pgcdc.errors import TargetError
from pgcdc.source.capture import AttachedTable
from pgcdc.source.enrich import queue_key_sql, replayed_at_least

CHUNK = 10_000  # keys a queued event holds (capture's chunk)


def typed_keys(conn: psycopg.Connection, t: AttachedTable) -> list[str] | str:
    """SQL turning canonical key texts (columns u.c0, u.c1, ...) back into the table's typed key
    columns, or why it cannot (a key of a type someone created)."""
    columns = {name: (base, typ) for name, base, _, _ in canon.pg_columns(conn, t.name)
               for k, typ in zip(t.key_columns, t.key_types) if k == name}
    typed = []
    for i, k in enumerate(t.key_columns):
        base, typ = columns[k]
        expr = canon.pg_typed(f"u.c{i}", base, typ)
        if expr is None:
            return f"{t.name}'s key column {k} ({typ}, a type someone created) back into its values"
        typed.append(f"{expr} as {sql.Identifier(k).as_string(None)}")
    return typed


def queue_differing(conn: psycopg.Connection, t: AttachedTable, keys: list[str],
                    typed: list[str] | str | None = None) -> int:
    """Queue verify's differing keys (canonical texts) as U events of the table, in one
    transaction: PostgreSQL turns each back into its typed key (`typed`: typed_keys's answer,
    when the caller asked already) and then into the queue's text. Needs the right to insert
    into the queue (an admin role's, `pgcdc grant ROLE --admin`)."""
    typed = typed_keys(conn, t) if typed is None else typed
    if isinstance(typed, str):
        raise TargetError(f"repair cannot turn {typed}: run `pgcdc resync {t.name}`")
    arrays = [[framed_values(key)[i] for key in keys] for i in range(len(t.key_columns))]
    unnest = ", ".join("%s::text[]" for _ in arrays)
    names = ", ".join(f"c{i}" for i in range(len(arrays)))
    queued = queue_key_sql(t.key_columns, "s").replace("%", "%%")  # (the query has parameters)
    try:
        with conn.transaction():
            conn.execute(
                f"insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys) "
                f"select pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), %s, 'U', %s, array_agg(k.k) "
                f"from (select {queued} as k, (row_number() over () - 1) / {CHUNK} as g "
                f"from (select {', '.join(typed)} from unnest({unnest}) u({names})) s) k group by k.g",
                (t.table_id, t.shard, *arrays))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise TargetError(f"repair queues the differing keys of {t.name} as changes, which needs an admin role "
                          f"({exc.diag.message_primary}): run it as the role that installed pgcdc, or one made by "
                          "`pgcdc grant ROLE --admin`") from None
    return len(keys)


def replayed(primary: psycopg.Connection, reader: psycopg.Connection) -> None:
    """Wait until the reader (a standby) has replayed what the primary wrote so far (keys just
    queued): a sync and a comparison after it read the queue there, and a key it has not seen
    yet would be neither applied nor on its way. (On a primary: no wait.) The insert position,
    not the written one: under synchronous_commit = off the keys' commit record may not be
    written yet when this asks."""
    row = primary.execute("select pg_catalog.pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    with reader.transaction():
        reader.execute(replayed_at_least(row[0]))
