"""Always watching: a follower with `[watch] every` set compares a slice of one table's key
ranges with PostgreSQL every so often (the tables in turn), so every row of every table is
compared again and again while the application writes, at a cost the setting bounds.

A round over a table's ranges starts with the ranges laid out anew (diff/rows.py's buckets:
~1000 rows each, by key); each slice compares the next `[watch] ranges` of them in a snapshot
of its own, exact under live writes (a row that differs by a change not applied yet is on its
way, not a difference: diff/in_flight.py). Keys inserted beyond the round's first and last key
are compared by the next round. How far the round got, and when the last one ended, is kept
beside the Delta table (`<consumer>.watch.json`): `pgcdc status` and the metrics show it.

Rows a slice finds different are kept as verify keeps them (lake/verified.py: `pgcdc status`
says ATTENTION, `pgcdc repair TABLE` compares those ranges alone); with `[watch] repair` on,
their keys are queued as changes at once (diff/queue.py), which the follower's next run
rewrites, and the next slice compares those ranges again first: if they still differ after
a run has applied past them, the record stays and status names it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pgcdc.diff.queue import queue_differing
from pgcdc.diff.rows import Buckets, Comparison, Ranges, compare
from pgcdc.errors import first_line
from pgcdc.lake import side_files, verified
from pgcdc.lake.state import load_state
from pgcdc.source import capture
from pgcdc.source.capture import AttachedTable
from pgcdc.source.db import connect
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from collections.abc import Callable

    import psycopg
    from pyspark.sql import SparkSession

    from pgcdc.settings import Settings, WatchSettings
    from pgcdc.sync.metrics import Metrics

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Watched:
    """A table's watch: the round's ranges (Buckets, encoded; None: lay them out anew), the next
    range to compare and how many there are, when the round began and the last whole one began
    and ended, and the ranges queued for a repair (`recheck`) with the batch the state was at then."""

    buckets: dict[str, Any] | None = None
    next: int = 0
    total: int = 0
    round_began: str = ""
    last_began: str | None = None  # the last whole round's: every row there then was compared since
    last_ended: str | None = None
    recheck: list[int] = field(default_factory=list)
    queued_at_batch: int = 0

    def through(self) -> float:
        """How far the round got (0-1)."""
        return min(1.0, self.next / self.total) if self.total else 0.0


def watched(spark: "SparkSession | None", path: str, key: str) -> Watched | None:
    """The table's watch as kept beside its Delta table, or None (without `spark`: of a table in
    a local folder alone)."""
    text = side_files.read_text(spark, path, f"{key}.watch.json")
    try:
        return None if not text else Watched(**json.loads(text))
    except (ValueError, TypeError):
        return None


def _keep(spark: "SparkSession", path: str, key: str, w: Watched) -> None:
    side_files.write_text(spark, path, f"{key}.watch.json", json.dumps(asdict(w)))


@dataclass(frozen=True)
class Slice:
    """One table's slice: its table and Delta table, the consumer's state, and the connections."""

    t: AttachedTable
    path: str
    state: ConsumerState
    primary: "psycopg.Connection"
    reader: "psycopg.Connection"


def watch_slice(spark: "SparkSession", s: Slice, settings: "WatchSettings") -> tuple[str, Watched, int]:
    """Compare the table's next slice of ranges (the module docstring): what was done, in a line,
    the watch as it goes on, and the rows found different (0: none)."""
    key = s.state.key
    w = watched(spark, s.path, key) or Watched()
    if w.recheck and s.state.batch > w.queued_at_batch:  # (a run has applied the queued keys)
        again = _compare(spark, s, w.buckets, w.recheck)
        if again.equal:
            verified.forget(spark, s.path, key)
        else:
            _found(spark, s, again)
        done = replace(w, recheck=[], queued_at_batch=0)
        _keep(spark, s.path, key, done)
        return f"{again.line()} (the {len(w.recheck)} key ranges compared again after their repair)", done, \
            len(again.differing)
    if w.buckets is None and w.next == 0 or w.next >= w.total:  # a new round
        w = Watched(None, 0, 0, _now(), w.last_began, w.last_ended)
    chosen = list(range(w.next, w.next + settings.ranges))
    found = _compare(spark, s, w.buckets, chosen)
    if found.problem is not None or found.columns is not None or found.ranges is None:
        w = replace(w, buckets=None)  # (laid out anew next time)
        _keep(spark, s.path, key, w)
        return found.line(), w, 0
    buckets = found.ranges.buckets
    w = replace(w, buckets=asdict(buckets), total=max(buckets.count, 1), next=w.next + len(chosen))
    if w.next >= w.total:
        w = replace(w, last_began=w.round_began, last_ended=_now())
    if found.equal:
        _keep(spark, s.path, key, w)
        return f"{found.line()} ({w.through():.0%} of the round)", w, 0
    _found(spark, s, found)
    if settings.repair:
        queue_differing(s.primary, s.t, found.differing)
        w = replace(w, recheck=list(found.ranges.chosen), queued_at_batch=s.state.batch)
    _keep(spark, s.path, key, w)
    then = "queued to be rewritten by the next run" if settings.repair else f"run `pgcdc repair {s.t.name}`"
    return f"{found.line()}; {then}", w, len(found.differing)


def _compare(spark: "SparkSession", s: Slice, buckets: dict[str, Any] | None, chosen: list[int]) -> Comparison:
    """compare() of the `chosen` ranges (laid out anew where `buckets` is None or no longer fits)."""
    laid = Buckets(**buckets) if buckets is not None else Buckets("", "")
    return compare(spark, s.reader, s.t, s.path, s.state, Ranges(laid, tuple(chosen), renew=True))


def _found(spark: "SparkSession", s: Slice, c: Comparison) -> None:
    """Keep the difference as verify would (lake/verified.py), for status and repair, with those
    earlier slices found and nobody repaired yet (where laid out alike)."""
    ranges, differing = c.ranges, len(c.differing)
    kept = verified.last(spark, s.path, s.state.key)
    if kept is not None and not kept.equal and kept.ranges is not None and ranges is not None:
        before = Ranges.decode(kept.ranges)
        if before.buckets == ranges.buckets:
            ranges = replace(ranges, chosen=tuple(sorted(set(before.chosen) | set(ranges.chosen))))
            differing += kept.differing
    verified.record(spark, s.path, s.state.key, verified.Verified(
        datetime.now(timezone.utc), c.version, False, differing, None if ranges is None else ranges.encode()))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Watcher:
    """The follower's watch: a slice every `[watch] every` seconds, the tables it synced in turn
    (`known`: by table id, its state and Delta table as last synced; a fan-in's sources and
    tables whose copy is under way wait). A slice that fails is said and the next one goes on."""

    settings: "Settings"
    spark: "SparkSession"
    said: "Callable[[str], None]"
    metrics: "Metrics | None" = None
    turn: int = 0
    last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        return self.settings.watch.every > 0 and time.monotonic() - self.last >= self.settings.watch.every

    def slice(self, known: dict[int, tuple[ConsumerState, str]]) -> str | None:
        """The next table's slice, if it is time for one; what it did."""
        if not self.due():
            return None
        self.last = time.monotonic()
        ids = sorted(i for i, (state, _) in known.items() if state.shard is None and state.copy is None)
        if not ids:
            return None
        table_id = ids[self.turn % len(ids)]
        self.turn += 1
        path = known[table_id][1]
        s = self.settings.source
        try:
            with connect(s.dsn) as primary, connect(s.reader_dsn, role=s.reader_role, reader=True) as reader:
                t = next((a for a in capture.list_attached(reader) if a.table_id == table_id), None)
                state = load_state(self.spark, path, self.settings.consumer, repair=False)
                if t is None or state is None or state.table_id != table_id or state.copy is not None:
                    return None
                line, w, differing = watch_slice(self.spark, Slice(t, path, state, primary, reader),
                                                 self.settings.watch)
            if self.metrics is not None:
                self.metrics.watched(t.name, w.through(), w.last_began, differing)
        except Exception as exc:  # (a slice never stops the follower)
            line = f"watch: a slice of table id {table_id} failed: {first_line(exc)}; the next one goes on"
        self.said(line)
        return line
