"""Reading the commit queue: which events the next batch of one table applies.

In one read-only REPEATABLE READ transaction on the reader (primary or hot standby):
txmin = pg_snapshot_xmin(pg_current_snapshot()). Every transaction below txmin has
ended, so the events below it are final ("strict" part). In out-of-order mode, once
the strict part has caught up, the visible events at or above txmin are taken too and
their txids recorded, so the next batches skip them (reference design 003).

A batch is described by txid bounds, not by a key list: the enrichment reads redo the
same selection with `Batch.filter_sql()`, so keys never pass through the driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from pgcdc.errors import TargetError
from pgcdc.watermark import ConsumerState, TxidSet


def _in_ranges(ts: TxidSet, alias: str) -> str:
    """SQL condition: the txid is in one of the ranges of `ts` (numbers only: safe to inline)."""
    return " or ".join(f"{alias}.txid between '{lo}'::xid8 and '{hi}'::xid8" for lo, hi in ts.ranges)


@dataclass(frozen=True)
class Snapshot:
    """What the reader's snapshot says about transactions."""

    txmin: int
    xmax: int
    in_progress: tuple[int, ...]  # empty on a hot standby, where it cannot be trusted
    standby: bool
    replayed: str | None = None  # on a standby: the WAL position it had replayed (pg_lsn text)


@dataclass(frozen=True)
class Batch:
    """The events of one table applied in one batch.

    Strict part: txids in [lo, hi) not in `skip` (already applied out of order).
    Out-of-order part: the txids in `extra` (all >= hi).
    """

    table_id: int
    lo: int
    hi: int
    skip: TxidSet
    extra: TxidSet
    events: int
    keys: int
    truncate: bool  # a TRUNCATE (or rewrite) of the whole table
    next_txid: int | None  # the first txid with events the batch leaves for later; None: nothing left
    partitions: int = 0  # partitions truncated or dropped (T events carrying their bounds: `truncated`)

    def filter_sql(self, alias: str = "q") -> str:
        """SQL condition selecting exactly this batch's queue rows (numbers only: safe to inline)."""
        strict = f"{alias}.txid >= '{self.lo}'::xid8 and {alias}.txid < '{self.hi}'::xid8"
        if self.skip.ranges:
            strict += f" and not ({_in_ranges(self.skip, alias)})"
        cond = f"({strict})"
        if self.extra.ranges:
            cond = f"({cond} or {_in_ranges(self.extra, alias)})"
        return f"{alias}.table_id = {int(self.table_id)} and {cond}"

    def next_state(self, state: ConsumerState) -> ConsumerState:
        return state.next(self.hi, self.extra)


def take_snapshot(conn: psycopg.Connection) -> Snapshot:
    """Read txmin (and, on a primary, the in-progress txids) in the current transaction."""
    txmin, xmax, xip, standby, replayed = conn.execute(
        "select pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, "
        "array(select x::text::bigint from pg_snapshot_xip(s) x), pg_is_in_recovery(), "
        "pg_last_wal_replay_lsn()::text from pg_current_snapshot() s").fetchone()
    return Snapshot(txmin, xmax, () if standby else tuple(xip), standby, replayed if standby else None)


def _ranges_between_gaps(txids: list[int], snap: Snapshot) -> TxidSet:
    """Compress applied txids into ranges. On a primary a range may span txids that had
    no events, as long as none of them was still running (it could still write); on a
    standby the running ones are unknown, so only adjacent txids merge."""
    ranges: list[tuple[int, int]] = []
    running = sorted(snap.in_progress)
    for t in txids:
        if ranges and (t == ranges[-1][1] + 1 or (not snap.standby and
                                                    not any(ranges[-1][1] < r < t for r in running))):
            ranges[-1] = (ranges[-1][0], t)
        else:
            ranges.append((t, t))
    return TxidSet(tuple(ranges))


def _outside(skip: TxidSet) -> str:
    """An AND clause leaving out the txids in `skip` (empty if it is)."""
    return f"and not ({_in_ranges(skip, 'q')}) " if skip.ranges else ""


# Per txid of one table: its events, keys, whether it truncated (or rewrote) the table, and how
# many of its partitions it truncated or dropped (T events carrying a bound). Already applied txids
# are left out in SQL: were they counted against the LIMIT, a run of them could fill the
# page and hide the unapplied txids behind it.
_PER_TXID = ("select q.txid::text::bigint, count(*), coalesce(sum(cardinality(q.keys)), 0), "
             "bool_or(q.op = 'T' and q.payload -> 'levels' is null), "
             "count(*) filter (where q.op = 'T' and q.payload -> 'levels' is not null) "
             "from pgcdc.commit_queue q where q.table_id = %s and q.txid >= %s::text::xid8 {upper}{skip}"
             "group by q.txid order by q.txid limit %s")


@dataclass
class _Budget:
    """Events and keys taken so far against the batch limits."""

    max_events: int
    max_keys: int
    events: int = 0
    keys: int = 0
    truncate: bool = False
    partitions: int = 0

    def take(self, events: int, keys: int, truncate: bool, partitions: int) -> bool:
        """Add one transaction if it fits (the first one always does); False if it does not."""
        if self.events and (self.events + events > self.max_events or self.keys + keys > self.max_keys):
            return False
        self.events, self.keys, self.truncate = self.events + events, self.keys + keys, self.truncate or truncate
        self.partitions += partitions
        return True


def _walk(rows: list[tuple[int, int, int, bool, int]], limit: int,
          budget: _Budget) -> tuple[list[int], int | None]:
    """Take transactions in txid order while they fit; return (taken txids, first txid not taken
    or None if every transaction was taken). `rows` came from a query cut at `limit` rows: if it
    returned that many, the last one is never taken, as what follows it is unknown."""
    taken: list[int] = []
    for i, (txid, events, keys, truncate, partitions) in enumerate(rows):
        if i == limit - 1 or not budget.take(events, keys, truncate, partitions):
            return taken, txid
        taken.append(txid)
    return taken, None


def plan_batch(conn: psycopg.Connection, snap: Snapshot, state: ConsumerState, *, out_of_order: bool,
               max_events: int, max_keys: int) -> Batch | None:
    """The next batch for the table in `state`, within the snapshot; None if there is nothing to do.

    Whole transactions only: a txid's events are never split across batches. A batch
    with zero events only moves the watermark (nothing to write).
    """
    lo = state.watermark
    top = max(lo, snap.txmin)  # the watermark never moves back, even if a standby reports a lower xmin
    budget = _Budget(max_events, max_keys)
    skip = state.out_of_order.at_or_above(lo)
    limit = max_events + 2  # enough to fill the budget and see the first txid past it
    rows = conn.execute(_PER_TXID.format(upper="and q.txid < %s::text::xid8 ", skip=_outside(skip)),
                        (state.table_id, str(lo), str(top), limit)).fetchall()
    _, stop = _walk(rows, limit, budget)
    hi = top if stop is None else stop

    extra: list[int] = []
    if out_of_order and stop is None:
        rows = conn.execute(_PER_TXID.format(upper="", skip=_outside(skip)),
                            (state.table_id, str(top), limit)).fetchall()
        extra, stop = _walk(rows, limit, budget)
    if budget.events == 0 and hi == lo:
        return None
    return Batch(state.table_id, lo, hi, skip, _ranges_between_gaps(extra, snap),
                 budget.events, budget.keys, budget.truncate, stop, budget.partitions)


def truncated(conn: psycopg.Connection, batch: Batch) -> list[dict[str, Any]]:
    """The bounds of the partitions the batch truncated or dropped (sql/functions/partition_bounds.sql)."""
    rows = conn.execute(f"select q.payload from pgcdc.commit_queue q where {batch.filter_sql('q')} "
                        "and q.op = 'T' and q.payload -> 'levels' is not null order by q.txid").fetchall()
    return [r[0] for r in rows]


def visible_at_or_above(conn: psycopg.Connection, table_id: int, snap: Snapshot) -> TxidSet:
    """The txids at or above the snapshot's txmin with events of the table that the snapshot
    shows (committed before it): a copy in this snapshot holds their changes."""
    rows = conn.execute("select distinct q.txid::text::bigint from pgcdc.commit_queue q "
                        "where q.table_id = %s and q.txid >= %s::text::xid8 order by 1",
                        (table_id, str(snap.txmin))).fetchall()
    return _ranges_between_gaps([r[0] for r in rows], snap)


def truncated_after(conn: psycopg.Connection, snap: Snapshot, table_ids: list[int]) -> set[int]:
    """The tables (of `table_ids`) with a TRUNCATE or a rewrite (an event of op T) committed that
    the snapshot does not show. Neither is MVCC-safe: PostgreSQL shows such a table empty to a
    snapshot taken before it, so what was read of it in `snap` may be wrong. A standby's snapshot
    does not say which transactions were in progress: there, any at or above its txmin. Read on
    the primary, which has every event a standby has."""
    if not table_ids:
        return set()
    rows = conn.execute("select distinct q.table_id from pgcdc.commit_queue q where q.op = 'T' "
                        "and q.table_id = any(%s) and q.txid >= %s::text::xid8 "
                        "and (%s or q.txid >= %s::text::xid8 or q.txid::text::bigint = any(%s))",
                        (table_ids, str(snap.txmin), snap.standby, str(snap.xmax), list(snap.in_progress))).fetchall()
    return {r[0] for r in rows}


def wait_for_txmin(reader: psycopg.Connection, txmin: int, role: str, timeout: float = 60) -> None:
    """Wait until the reader's snapshots have reached `txmin` (a standby replays the primary
    with a lag); fail naming the lag after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        with reader.transaction():
            now = take_snapshot(reader).txmin
        if now >= txmin:
            return
        if time.monotonic() > deadline:
            raise TargetError(f"{role} is behind the primary (its txmin {now} < {txmin} after {timeout:.0f} s); "
                              "check its replication and run again")
        time.sleep(0.25)


class Behind(Exception):
    """The reader's snapshot has not reached the txid a copy waits for (args[0]: its txmin)."""


T = TypeVar("T")


def once_reached(reader: psycopg.Connection, txmin: int, role: str, work: Callable[[], T], timeout: float = 60) -> T:
    """`work()` once the reader's snapshots have reached `txmin` (wait_for_txmin), waiting and
    trying again while it raises Behind: a standby's snapshot xmin can move back (a transaction's
    xid becomes known to it only with the transaction's first WAL record). Fails naming the lag
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        wait_for_txmin(reader, txmin, role, timeout)
        try:
            return work()
        except Behind as behind:
            if time.monotonic() > deadline:
                raise TargetError(f"{role} is behind the primary (its txmin {behind.args[0]} < {txmin} after "
                                  f"{timeout:.0f} s); check its replication and run again") from None
            time.sleep(0.25)


def queued_txids(reader: psycopg.Connection, watermarks: dict[int, int]) -> dict[int, list[tuple[int, int, datetime]]]:
    """For each table (id -> watermark), the txids with events at or above its watermark:
    (txid, events, when the first was queued), in txid order. One scan of the queue from the
    lowest watermark on, for all of a pass's tables (the queue is indexed by txid alone)."""
    heads: dict[int, list[tuple[int, int, datetime]]] = {table_id: [] for table_id in watermarks}
    if not watermarks:
        return heads
    rows = reader.execute(
        "select q.table_id, q.txid::text::bigint, count(*), min(q.at) from pgcdc.commit_queue q "
        "join unnest(%s::int[], %s::text[]) t(id, wm) on q.table_id = t.id and q.txid >= t.wm::xid8 "
        "where q.txid >= %s::text::xid8 group by 1, 2 order by 1, 2",
        (list(watermarks), [str(w) for w in watermarks.values()], str(min(watermarks.values())))).fetchall()
    for table_id, txid, events, at in rows:
        heads[table_id].append((txid, events, at))
    return heads


def pending(reader: psycopg.Connection, state: ConsumerState) -> tuple[int, datetime | None]:
    """Events of the table not applied yet (above the watermark, outside the out-of-order set),
    and when the oldest of them was queued."""
    rows = reader.execute("select q.txid::text::bigint, count(*), min(q.at) from pgcdc.commit_queue q "
                          "where q.table_id = %s and q.txid >= %s::text::xid8 group by 1",
                          (state.table_id, str(state.watermark))).fetchall()
    return unapplied(rows, state)


def unapplied(rows: list[tuple[int, int, datetime]], state: ConsumerState) -> tuple[int, datetime | None]:
    """Of queued (txid, events, first queued at) rows, the events `state` has not applied (at or
    above its watermark, outside its out-of-order set), and when the oldest was queued."""
    left = [(n, at) for txid, n, at in rows if txid >= state.watermark and txid not in state.out_of_order]
    return sum(n for n, _ in left), min((at for _, at in left), default=None)
