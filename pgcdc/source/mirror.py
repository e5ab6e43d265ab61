"""The consumer state's mirror in PostgreSQL (`pgcdc.consumer_state`): what `pgcdc status` and
queue retention read, a copy's registration before its snapshot, and the record that a batch's
Delta commit is about to be made (how a restore to an earlier point is noticed).

The truth is the state in the Delta commit (`pgcdc.lake.state`); this is its copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc.watermark import TxidSet

if TYPE_CHECKING:
    import psycopg

    from pgcdc.watermark import ConsumerState


def mirror_state(conn: "psycopg.Connection", state: ConsumerState, target: str, copied: bool = False) -> None:
    """Copy the state into PostgreSQL (pgcdc.consumer_state) for status and queue retention.
    `copied`: the state of a whole-table copy (or a chunked copy's first chunk), which ends a
    resync the retention limit asked for; a chunked copy's progress goes along (copy_progress)."""
    progress = None if state.copy is None else json.dumps(state.copy.encode())
    conn.execute(
        "insert into pgcdc.consumer_state (consumer, table_id, target, watermark, out_of_order, batch, updated_at, "
        "copy_progress) values (%s, %s, %s, %s::text::xid8, %s, %s, now(), %s::jsonb) "
        "on conflict (consumer, table_id) do update set "
        "target = excluded.target, watermark = excluded.watermark, out_of_order = excluded.out_of_order, "
        "batch = excluded.batch, updated_at = now(), copy_progress = excluded.copy_progress"
        + (", resync_reason = null, copy_from = null" if copied else ""),
        (state.consumer, state.table_id, target, str(state.watermark), state.out_of_order.encode(), state.batch,
         progress))


def mirror_states(conn: "psycopg.Connection", states: list[tuple[ConsumerState, str]]) -> None:
    """`mirror_state` for many (state, target) pairs in one round trip (a pass's idle tables),
    each only while the mirror still holds the state's batch."""
    if states:
        with conn.cursor() as cur:
            cur.executemany(
                "update pgcdc.consumer_state set target = %s, watermark = %s::text::xid8, out_of_order = %s, "
                "updated_at = now() where consumer = %s and table_id = %s and batch = %s",
                [(target, str(s.watermark), s.out_of_order.encode(), s.consumer, s.table_id, s.batch)
                 for s, target in states])


@dataclass(frozen=True)
class Mirrored:
    """A table's mirrored state, as much of it as a pass needs to leave an idle table alone."""

    target: str
    watermark: int
    out_of_order: TxidSet
    batch: int
    committing: int | None
    resync: bool  # marked for a copy (it fell past the retention limit)


def mirrored(conn: "psycopg.Connection", consumer: str, table_ids: list[int]) -> dict[int, Mirrored]:
    """The mirrored state of each of the consumer's tables that has one."""
    rows = conn.execute("select table_id, target, watermark::text::bigint, out_of_order, batch, committing, "
                        "resync_reason is not null from pgcdc.consumer_state where consumer = %s and table_id = any(%s)",
                        (consumer, table_ids)).fetchall()
    return {table_id: Mirrored(target, int(wm), TxidSet.decode(ooo or ""), batch, committing, resync)
            for table_id, target, wm, ooo, batch, committing, resync in rows}


def register_table(conn: "psycopg.Connection", consumer: str, table_id: int, target: str) -> int:
    """Before a copy takes its snapshot: make queue retention keep the table's events from the
    primary's current xmin on (a state already there keeps its lower watermark; one marked for a
    resync records it as copy_from). Returns the txid retention keeps the table's events from
    now (pgcdc.retention_horizon's term for it): a snapshot whose txmin is at least that has
    every event the copy leaves to the queue kept, a snapshot taken afterwards included."""
    xmin = int(conn.execute("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint").fetchone()[0])
    row = conn.execute(
        "insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
        "values (%s, %s, %s, %s::text::xid8, 0) on conflict (consumer, table_id) do update "
        "set watermark = least(pgcdc.consumer_state.watermark, excluded.watermark), "
        "copy_from = case when pgcdc.consumer_state.resync_reason is not null "
        "  then least(pgcdc.consumer_state.copy_from, excluded.watermark) end "  # (least() skips a null)
        "returning (case when resync_reason is null then watermark else copy_from end)::text::bigint",
        (consumer, table_id, target, str(xmin))).fetchone()
    return int(row[0])


def recorded_target(conn: "psycopg.Connection", consumer: str, table_id: int) -> str | None:
    """The Delta table the consumer recorded for the table (its last sync's), or None: a state
    only registered (batch 0: no copy committed yet) records none."""
    row = conn.execute("select target from pgcdc.consumer_state where consumer = %s and table_id = %s and batch > 0",
                       (consumer, table_id)).fetchone()
    return row[0] if row else None


def target_holder(conn: "psycopg.Connection", consumer: str, path: str, table_id: int,
                  into: str | None = None) -> str | None:
    """The name of another table the consumer syncs into `path` (one renamed away from the name
    that derives it), or None; the other sources of fan-in `into` share it."""
    row = conn.execute("select coalesce(a.table_name, a.relid::text) from pgcdc.consumer_state s "
                       "join pgcdc.attached a using (table_id) where s.consumer = %s and s.target = %s "
                       "and s.table_id <> %s and (a.into_table is null or a.into_table is distinct from %s)",
                       (consumer, path, table_id, into)).fetchone()
    return row[0] if row else None


def resync_reason(conn: "psycopg.Connection", consumer: str, table_id: int) -> str | None:
    """Why the table must be copied again for the consumer (it fell past the retention limit), or None."""
    row = conn.execute("select resync_reason from pgcdc.consumer_state where consumer = %s and table_id = %s",
                       (consumer, table_id)).fetchone()
    return row[0] if row else None


def mark_committing(conn: "psycopg.Connection", state: ConsumerState, target: str) -> None:
    """Record in PostgreSQL that the Delta commit of batch `state.batch` is about to be made,
    after every row it holds was read. A database that lacks this record later was restored to
    an earlier point (or failed over to a standby that was behind) and may lack changes Delta
    holds."""
    conn.execute(
        "insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch, committing) "
        "values (%s, %s, %s, %s::text::xid8, 0, %s) on conflict (consumer, table_id) do update "
        "set committing = greatest(pgcdc.consumer_state.committing, excluded.committing)",
        (state.consumer, state.table_id, target, str(state.watermark), state.batch))


def committing_batch(conn: "psycopg.Connection", consumer: str, table_id: int) -> tuple[bool, int | None]:
    """(whether PostgreSQL knows the consumer's sync of the table, the highest batch whose commit
    it recorded as started: None if not recorded yet). A state only registered (batch 0, no
    commit started: register_table) records no sync."""
    row = conn.execute("select committing, batch from pgcdc.consumer_state where consumer = %s and table_id = %s",
                       (consumer, table_id)).fetchone()
    if row is None or (row[1] == 0 and row[0] is None):
        return False, None
    return True, row[0]
