"""Continuous sync (`pgcdc ingest --follow`): one Spark session, a run as soon as there is work.

Between runs the follower asks the queue whether any synced table has an event it could apply
now (one cheap query on the reader, `poll`), every `interval` seconds while idle; a run holds
a table's lease for its own length only, so `pgcdc compact` of that table, and the consumer's
other workers, get their turn between runs. Capture is left as it is: no NOTIFY from its
triggers, whose commit would take PostgreSQL's global notify lock in every application
transaction (docs/operations.md).

A first SIGTERM or SIGINT stops the follower after the batch in flight (exit 0); a second
stops it at once, which is as safe as a kill: a batch lands in one Delta commit or not at
all. A failed run is retried with a growing pause, and a table that keeps failing is held
back for a while without holding the others back.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg

from pgcdc import records
from pgcdc.errors import FAILURE, BusyError, PgcdcError, SourceError
from pgcdc.log import fields
from pgcdc.settings import Settings
from pgcdc.source.db import connect
from pgcdc.sync import compact
from pgcdc.sync.ingest import Job
from pgcdc.sync.metrics import Metrics
from pgcdc.sync.report import TableReport
from pgcdc.errors import first_line
from pgcdc.sync.runs import run_tables
from pgcdc.sync.signals import Stopper
from pgcdc.sync.watch import Watcher

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

HEARTBEAT = 60.0  # seconds: a run even without work (queue upkeep, `pgcdc status` sees the follower)
MAX_PAUSE = 60.0  # seconds: the longest pause after failures


@dataclass
class Backoff:
    """Consecutive failures of one thing and when to try it again (1, 2, 4 ... MAX_PAUSE s)."""

    failures: int = 0
    next_try: float = 0.0

    def failed(self) -> float:
        self.failures += 1
        pause = min(MAX_PAUSE, 2.0 ** (self.failures - 1))
        self.next_try = time.monotonic() + pause
        return pause

    def due(self) -> bool:
        return time.monotonic() >= self.next_try


@dataclass
class Follower:
    """The follower's loop; `run` returns its exit code (0 after a requested stop)."""

    settings: Settings
    spark: "SparkSession"
    interval: float = 1.0
    compact_every: float | None = None
    metrics: "Metrics | None" = None
    stop: Stopper = field(default_factory=Stopper)
    tables: dict[str, Backoff] = field(default_factory=dict)  # failing tables
    known: set[int] = field(default_factory=set)  # table ids the last run synced
    poll_conn: psycopg.Connection | None = None  # kept between polls
    watcher: Watcher | None = None  # `[watch] every`: a slice of a table compared now and then (sync/watch.py)

    def run(self) -> int:
        job = Job(self.settings, self.spark, following=True)
        if self.settings.watch.every > 0 and self.watcher is None:
            self.watcher = Watcher(self.settings, self.spark, lambda line: _log.info("watch: %s", line), self.metrics)
        job.stopping = self.stop
        if self.metrics is not None:
            job.on_copy = self.metrics.copy_progress
        job.interrupted = lambda: self.stop.at_once
        try:
            return self._follow(job)
        finally:
            job.close()

    def _follow(self, job: Job) -> int:
        runs = Backoff()
        stuck: tuple[tuple[int, int], ...] | None = None  # work the last run could not apply (a long transaction's)
        last_run = time.monotonic() - HEARTBEAT  # (the first run comes at once)
        last_compact = time.monotonic()
        _log.info("following consumer %s: a run whenever the queue holds work, checked every %.1f s while idle "
                  "(stop: SIGTERM or Ctrl-C)", self.settings.consumer, self.interval)
        parent = os.getppid() if "PYSPARK_GATEWAY_PORT" in os.environ else None  # (spark-submit's JVM)
        while not self.stop():
            if parent is not None and os.getppid() != parent:
                _log.error("spark-submit's JVM ended (stopped or killed): stopping; a clean stop signals this "
                           "Python driver instead (docs/operations.md)")
                return FAILURE
            try:
                work = self.poll()
            except (PgcdcError, psycopg.Error) as exc:
                work = ((-1, 1),)  # (let the run meet the problem: it retries and says so)
                _log.debug("poll failed: %s", first_line(exc))
            if self.watcher is not None:
                self.watcher.slice(job.known)
            heartbeat = time.monotonic() - last_run >= HEARTBEAT
            retry = any(b.due() for b in self.tables.values())  # a held-back table's pause is over
            if not runs.due():  # (a failed run's pause)
                self.stop.wait(min(self.interval, max(runs.next_try - time.monotonic(), 0.05)))
                continue
            if (not work or work == stuck) and not heartbeat and not retry:
                self.stop.wait(self.interval)
                continue
            try:
                reports = self.run_once(job)
            except BusyError as exc:
                _log.info("%s; trying again in %.1f s", exc, self.interval)
                self.stop.wait(self.interval)
                continue
            except Exception as exc:  # a lost connection, a restarting server, Spark: retried
                self.stop.raise_if_at_once()  # (not a failed run: the second signal, as another error)
                pause = runs.failed()
                level = logging.WARNING if isinstance(exc, SourceError) else logging.ERROR
                _log.log(level, "run failed (%d in a row): %s; trying again in %.0f s", runs.failures,
                         first_line(exc), pause, extra=fields(records.RunFailed(first_line(exc), runs.failures)))
                if self.metrics is not None:
                    self.metrics.run_failed()
                continue
            if runs.failures:
                _log.info("run succeeded again after %d failure(s)", runs.failures)
            runs = Backoff()
            last_run = time.monotonic()
            stuck = None if any(r.wrote for r in reports) else work
            if self.compact_every is not None and time.monotonic() - last_compact >= self.compact_every \
                    and not self.stop():
                last_compact = time.monotonic()
                try:
                    compact.compact(self.settings, self.spark, self.settings.tables)
                except Exception as exc:
                    _log.error("compaction failed: %s; trying again in %.0f s", first_line(exc), self.compact_every)
        if self.poll_conn is not None:
            self.poll_conn.close()
        self.stop.raise_if_at_once()  # (a run that ended on the second signal without an error)
        _log.info("follower of consumer %s stopped (%s)", self.settings.consumer, self.stop.signal_name or "asked")
        return 0

    def run_once(self, job: Job) -> list[TableReport]:
        """One run over every table not held back; failing tables get their own pauses."""
        held = frozenset(name for name, b in self.tables.items() if not b.due())
        reports, failed = run_tables(job, skip=held)
        self.known = set(job.table_ids.values())
        for name in [name for name in self.tables if name not in job.table_ids]:  # (detached meanwhile)
            del self.tables[name]
        for r in reports:
            if self.tables.pop(r.table, None) is not None:
                _log.info("%s: synced again", r.table)
        for name, exc in failed.items():
            pause = self.tables.setdefault(name, Backoff()).failed()
            _log.warning("%s: held back for %.0f s (%d failure(s) in a row)", name, pause, self.tables[name].failures)
        if self.metrics is not None:
            self.metrics.observe(reports, failed)
        return reports

    def poll(self) -> tuple[tuple[int, int], ...]:
        """(table id, events it could apply now) for each synced table with work: events above its
        watermark that are committed (out-of-order mode) or below the reader's txmin (strict
        mode), capped at 10,000; a table without a state, or marked for a copy, counts as work."""
        s = self.settings
        applicable = ("pg_visible_in_snapshot(q.txid, pg_current_snapshot())" if s.ingest.mode == "out_of_order"
                      else "q.txid < pg_snapshot_xmin(pg_current_snapshot())")
        every = not s.tables
        if self.poll_conn is None or self.poll_conn.closed or self.poll_conn.broken:
            self.poll_conn = connect(s.source.reader_dsn, role=s.source.reader_role,
                                     reader=True)  # (names resolve in pg_catalog first, as in every reading session)
        try:
            rows = self.poll_conn.execute(
                "select a.table_id, case when st.table_id is null or st.resync_reason is not null then 1 else "
                f"  (select count(*) from (select 1 from pgcdc.commit_queue q where q.table_id = a.table_id "
                f"     and q.txid >= st.watermark and {applicable} limit 10000) w) end "
                "from pgcdc.attached a left join pgcdc.consumer_state st "
                "  on st.table_id = a.table_id and st.consumer = %s "
                "where %s or a.table_id = any(%s)", (s.consumer, every, list(self.known))).fetchall()
        except psycopg.Error:
            self.poll_conn.close()  # (a new connection next time)
            raise
        return tuple(sorted((table_id, int(n)) for table_id, n in rows if n))


def follow(settings: Settings, spark: "SparkSession", interval: float, compact_every: float | None = None,
           metrics_port: int | None = None, metrics_address: str = "127.0.0.1") -> int:
    """Run the follower until SIGTERM/SIGINT; its exit code."""
    metrics = Metrics.serve(metrics_port, metrics_address) if metrics_port is not None else None
    follower = Follower(settings, spark, interval, compact_every, metrics)
    follower.stop.install()
    return follower.run()
