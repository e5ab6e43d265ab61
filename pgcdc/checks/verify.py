"""`pgcdc verify`: compare each Delta table with its PostgreSQL table, independently of the sync
(the comparison: pgcdc/diff/rows.py), and say what to do about a difference, from what the
consumer's state and the table's log say of why."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from pgcdc.diff.rows import Comparison, compare
from pgcdc.errors import TargetError
from pgcdc.lake import history, tablelog, target, verified
from pgcdc.lake.paths import target_path
from pgcdc.lake.state import app_id, load_state
from pgcdc.source.capture import AttachedTable
from pgcdc.sync.plan import table_path
from pgcdc.watermark import ConsumerState, state_key

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)


def verify(spark: "SparkSession", conn: "psycopg.Connection", root: str,
           tables: list[AttachedTable], consumer: str | None = None) -> list[Comparison]:
    """Compare each table with its Delta table: the consumer's (kept through renames,
    plan.table_path), or <root>/<schema>.<table> when no consumer is named."""
    results = []
    for t in tables:
        path = table_path(conn, consumer, t, root)[0] if consumer else target_path(root, t.target_name)
        state = _state(spark, path, consumer, t)
        if isinstance(state, ConsumerState) and state.copy is not None:  # (Delta holds part of the rows)
            results.append(Comparison(t.name, path, 0, 0, 0, 0, problem="a copy in chunks is under way",
                                      next_step="run `pgcdc ingest`, which finishes it, then verify again"))
            continue
        found = compare(spark, conn, t, path, state if isinstance(state, ConsumerState) else None)
        if isinstance(state, ConsumerState):
            _keep(spark, path, state.key, found)
        if not found.equal and not found.next_step:
            found = replace(found, next_step=_rows_step(spark, t, path, consumer, found, state))
        results.append(found)
        kept = history.history_path(path)
        if target.is_delta(spark, kept):  # its history's current rows too (docs/history.md)
            found = replace(compare(spark, conn, t, kept), table=f"{t.name} (history)")
            if not found.equal and not found.next_step:
                found = replace(found, next_step="its history follows the Delta table at the end of each run that "
                                "reaches the table: run `pgcdc ingest`, then verify again")
            results.append(found)
    return results


def _keep(spark: "SparkSession", path: str, key: str, found: Comparison) -> None:
    """Keep a whole comparison's outcome beside the Delta table (lake/verified.py), for repair to
    compare again only the ranges that differed; a lake verify may not write to is left as is."""
    from py4j.protocol import Py4JJavaError

    if found.problem is not None or found.columns is not None:
        return
    try:
        verified.record(spark, path, key, verified.Verified(
            datetime.now(timezone.utc), found.version, found.equal, len(found.differing),
            None if found.ranges is None else found.ranges.encode()))
    except (OSError, Py4JJavaError) as exc:
        _log.debug("verify could not keep its outcome beside %s: %s", path, exc)


def _state(spark: "SparkSession", path: str, consumer: str | None, t: AttachedTable) -> ConsumerState | str | None:
    """The consumer's committed state of the table (None: no consumer named), or why there is none."""
    if consumer is None:
        return None
    try:
        state = load_state(spark, path, state_key(consumer, t.fan_in_shard), repair=False) \
            if target.is_delta(spark, path) else None
    except TargetError as exc:
        return str(exc)
    return state if state is not None else f"consumer {consumer} has no state in {path}"


def _rows_step(spark: "SparkSession", t: AttachedTable, path: str, consumer: str | None, found: Comparison,
               state: ConsumerState | str | None) -> str:
    """What to do about rows that differ, from what the consumer's state and the table's log say of
    why (the queue's part, changes not synced yet, verify counted apart already)."""
    again = f"`pgcdc resync {t.name}` writes it again from PostgreSQL"
    if consumer is None:
        return f"re-run `pgcdc ingest` once writes pause and verify again; if they still differ, {again}"
    if state is None or isinstance(state, str):
        return f"consumer {consumer}'s state in {path} is missing: {again}"
    if state.table_id != t.table_id:
        return (f"{t.name} was detached and attached again since {path} was synced (changes in between were not "
                f"captured): run `pgcdc ingest`, which reconciles it by range (only the rows that differ rewritten)")
    others = tablelog.writes_since(spark, path, app_id(state.key),
                                   siblings=app_id(consumer) + "@" if t.into is not None else "")  # (state_key's)
    if others:
        return (f"another writer changed {path} after pgcdc's last commit ({', '.join(others[:3])}): `pgcdc repair "
                f"{t.name}` rewrites the rows that differ ({again})")
    if found.duplicates:
        return f"pgcdc never writes a key twice, yet Delta holds some more than once: {again}"
    return (f"no change pgcdc has not applied explains them and no other writer changed {path}: rows were "
            f"changed where capture did not see them (its triggers disabled, `session_replication_role = "
            f"replica`, a restore): `pgcdc repair {t.name}` rewrites the rows that differ ({again})")
