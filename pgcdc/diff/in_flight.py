"""Differences still on their way: how `pgcdc verify` tells a row the sync has not reached yet from
a row that differs for good, while the application writes.

Verify loads the consumer's committed state first, then the Delta table's newest version V, then
takes PostgreSQL's snapshot S (one REPEATABLE READ transaction for every read of PostgreSQL).
Every row in Delta at V was read by a batch that ended before V was committed, so before S:
what Delta holds, S shows (or something newer). A row can then differ only by a transaction
the state has not applied (an event at or above its watermark, outside its out-of-order
set) that S shows; its event is in the queue, visible in S, since capture writes it in that
transaction. So a differing key is on its way if S's queue holds an event of it not applied
by the state, or an unapplied TRUNCATE or rewrite (a T event) of the table; any other
difference is real: a row changed where capture did not see it (triggers disabled,
`session_replication_role = replica`), or a Delta table changed behind pgcdc's back. The state
may be older than V (a run committed between the two reads): its unapplied events then
include some V holds, which only errs toward "on its way".

Columns alike: the state keeps a fingerprint of the columns its commit checked the Delta table
against (`ConsumerState.columns`); if PostgreSQL's columns in S are not those, a column change
has come since, which the next run brings to Delta (in place or by a copy), so columns that
differ then are on their way too. If they are those, Delta at V should have them: a difference
is real (the Delta table's schema changed by another tool).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc.lake.landing import Landing
from pgcdc.source.columns import fingerprint, table_columns
from pgcdc.source.enrich import decoded_keys

if TYPE_CHECKING:
    import psycopg

    from pgcdc.source.capture import AttachedTable
    from pgcdc.watermark import ConsumerState


def on_their_way(conn: "psycopg.Connection", t: "AttachedTable", state: "ConsumerState", key_sql: str,
                 keys: list[str]) -> set[str]:
    """Of `keys` (verify's key texts: `key_sql` over the typed key columns of alias s), those
    with an event in the queue that `state` has not applied, in the connection's snapshot;
    all of them if an unapplied T event of the table is there."""
    if not keys:
        return set()
    truncated = conn.execute("select q.txid::text::bigint from pgcdc.commit_queue q where q.table_id = %s "
                             "and q.op = 'T' and q.txid >= %s::text::xid8",
                             (t.table_id, str(state.watermark))).fetchall()
    if any(txid not in state.out_of_order for txid, in truncated):
        return set(keys)
    rows = conn.execute(
        f"select distinct {key_sql}, s.txid from (select {decoded_keys(t)}, q.txid::text::bigint as txid "
        f"from pgcdc.commit_queue q cross join lateral unnest(q.keys) u(k) "
        f"where q.table_id = %s and q.txid >= %s::text::xid8) s where {key_sql} = any(%s)",
        (t.table_id, str(state.watermark), keys)).fetchall()
    return {key for key, txid in rows if txid not in state.out_of_order}


def columns_checked(conn: "psycopg.Connection", t: "AttachedTable", state: "ConsumerState") -> bool | None:
    """Whether `state`'s commit checked its Delta table against the table's columns as they are
    in the connection's snapshot (its fingerprint, with whichever of pgcdc's own columns the
    consumer lands: each way is tried); None where the state does not say (older pgcdc)."""
    if not state.columns:
        return None
    columns = table_columns(conn, t.name)
    return any(fingerprint(t.name, t.key_columns, columns, way.shape()) == state.columns for way in Landing.every())
