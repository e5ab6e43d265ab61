"""`pgcdc repair`: rewrite only the rows that differ. Verify (checks/verify.py) finds them, while
the application writes, apart from those still on their way; their keys go into the queue as
changes (U events, as capture's), and the table's sync applies them at once: each key's row read
again from PostgreSQL, written where it differs, deleted where PostgreSQL no longer has it. Work
grows with the rows that differ, not with the table.

Why it is exact under live writes: a queued key is a change like any other; the batch that
applies it reads the row as it is when it reads (a later change is a later event), so a key
queued twice, or one the application changes meanwhile, still lands as PostgreSQL holds it. The
table's lease is held from the comparison to the end, so no other worker applies it meanwhile.
A kill after the keys are queued leaves them in the queue: the next run applies them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgcdc.checks import canon
from pgcdc.checks.verify import Comparison, compare, framed_values
from pgcdc.errors import TargetError
from pgcdc.lake.state import load_state
from pgcdc.source.capture import AttachedTable
from pgcdc.source.enrich import queue_key_sql, replayed_at_least
from pgcdc.source.sessions import RunSource
from pgcdc.settings import Settings
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import leased_tables, preflight
from pgcdc.sync.plan import table_path
from pgcdc.watermark import state_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHUNK = 10_000  # keys a queued event holds (capture's chunk)


@dataclass(frozen=True)
class Repair:
    """What repair found and did for one table: the comparison before, the keys it queued and
    applied (none with `dry_run`), and the comparison after (None if nothing was queued)."""

    table: str
    before: Comparison
    queued: int
    after: Comparison | None = None

    @property
    def done(self) -> bool:
        """The table is equal now (or was), or nothing could be done (a problem verify names)."""
        return (self.after or self.before).equal

    def line(self) -> str:
        if self.before.equal:
            return f"{self.table}: nothing to repair ({self.before.line().split(': ', 1)[1]})"
        if self.before.problem is not None or self.before.columns is not None:
            return f"{self.before.line()} (repair rewrites rows, not this)"
        if self.after is None:
            return (f"{self.table}: {self.queued} rows differ ({self.before.line().split(': ', 1)[1]}); "
                    "`pgcdc repair` without --dry-run rewrites them")
        return f"{self.table}: {self.queued} differing rows read again and rewritten; now {self.after.line()}"


def repair(settings: Settings, names: list[str], dry_run: bool = False, say: Callable[[str], None] | None = None,
           spark: "SparkSession | None" = None) -> list[Repair]:
    """Repair each table (verify, then the differing rows' keys queued and applied), each under its
    lease (runs.leased_tables); in a local Spark session unless given one, once the settings are
    checked."""
    if spark is None:
        preflight(settings, names)
        spark = get_session(settings.spark, target_root=settings.target.root)
    job = Job(settings, spark, say)

    def one(src: RunSource, t: AttachedTable, sync: Callable[[], object]) -> Repair:
        done = _repair(spark, settings, src, t, sync, dry_run)
        (say or print)(done.line())
        return done
    return leased_tables(job, names, one)


def _repair(spark: "SparkSession", settings: Settings, src: RunSource, t: AttachedTable, sync: Callable[[], object],
            dry_run: bool) -> Repair:
    """One table's repair, its lease held: `sync` runs its sync. (Six parameters: the run's
    session and settings, the table's source, and what to do.)"""
    path = table_path(src.primary, settings.consumer, t, settings.target.root)[0]
    key = state_key(settings.consumer, t.fan_in_shard)
    state = load_state(spark, path, key, repair=False)
    if state is None:
        raise TargetError(f"consumer {settings.consumer} has not synced {t.name} yet (no state in {path}): run `pgcdc "
                          "ingest`, whose first run copies it")
    if state.copy is not None:
        raise TargetError(f"a copy of {t.name} in chunks is under way: run `pgcdc ingest`, which finishes it, then "
                          "repair")
    before = compare(spark, src.reader, t, path, state)
    if before.equal or before.problem is not None or before.columns is not None or dry_run:
        return Repair(t.name, before, len(before.differing))
    queued = queue_differing(src.primary, t, before.differing)
    _replayed(src)
    sync()
    return Repair(t.name, before, queued, compare(spark, src.reader, t, path, load_state(spark, path, key, repair=False)))


def _replayed(src: RunSource) -> None:
    """Wait until the reader (a standby) has replayed the queued keys: the sync and the comparison
    after it read the queue there, and a key it has not seen yet would be neither applied nor on
    its way. (On a primary: no wait.)"""
    row = src.primary.execute("select pg_catalog.pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    with src.reader.transaction():
        src.reader.execute(replayed_at_least(row[0]))


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
