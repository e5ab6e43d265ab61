"""The follower's Prometheus endpoint (`pgcdc ingest --follow --metrics-port PORT`).

Per table (label `table`): lag (age of the oldest change not applied yet), pending events,
batches, events, rows upserted/deleted, failures, the time of the last successful sync, and a
copy in chunks' progress and time left (updated after each chunk);
for the follower: failed runs. A registry of its own, so nothing else leaks into it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

if TYPE_CHECKING:
    from pgcdc.sync.report import TableReport

_log = logging.getLogger(__name__)


class Metrics:
    """The follower's metrics; `observe` after every run."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.lag = Gauge("pgcdc_lag_seconds", "age of the oldest change of the table not applied yet (0: none)",
                         ["table"], registry=r)
        self.pending = Gauge("pgcdc_pending_events", "events of the table not applied yet", ["table"], registry=r)
        self.batches = Counter("pgcdc_batches", "batches applied", ["table"], registry=r)
        self.events = Counter("pgcdc_events", "queue events applied", ["table"], registry=r)
        self.rows = Counter("pgcdc_rows", "rows written to Delta", ["table", "op"], registry=r)
        self.failures = Counter("pgcdc_table_failures", "syncs of the table that failed", ["table"], registry=r)
        self.last_success = Gauge("pgcdc_last_success_timestamp_seconds", "when the table last synced without error",
                                  ["table"], registry=r)
        self.copy_done = Gauge("pgcdc_copy_progress_ratio", "how far the table's copy in chunks is (0-1; 1: done)",
                               ["table"], registry=r)
        self.copy_eta = Gauge("pgcdc_copy_eta_seconds", "time left of the table's copy in chunks at its rate "
                              "(-1: unknown)", ["table"], registry=r)
        self.watch_round = Gauge("pgcdc_watch_round_ratio", "how far the follower's watch got through the table's "
                                 "key ranges this round (0-1)", ["table"], registry=r)
        self.compared_since = Gauge("pgcdc_compared_since_timestamp_seconds", "every row of the table was compared "
                                    "with PostgreSQL since this moment (the last whole round's start; 0: none yet)",
                                    ["table"], registry=r)
        self.differing = Gauge("pgcdc_rows_differing", "rows the watch's last slice of the table found different",
                               ["table"], registry=r)
        self.run_failures = Counter("pgcdc_run_failures", "follower runs that failed as a whole (connection, ...)",
                                    registry=r)

    @classmethod
    def serve(cls, port: int, address: str = "127.0.0.1") -> "Metrics":
        """Metrics served over HTTP on `address`:`port` (/metrics)."""
        metrics = cls()
        start_http_server(port, addr=address, registry=metrics.registry)
        _log.info("metrics on http://%s:%d/metrics", address, port)
        return metrics

    def observe(self, reports: "list[TableReport]", failed: dict[str, Exception]) -> None:
        now = datetime.now(timezone.utc)
        for r in reports:
            self.lag.labels(r.table).set((now - r.oldest_pending).total_seconds() if r.oldest_pending else 0.0)
            self.pending.labels(r.table).set(r.pending_events)
            self.batches.labels(r.table).inc(r.batches)
            self.events.labels(r.table).inc(r.events)
            self.rows.labels(r.table, "upserted").inc(r.upserted + (r.copied or 0))
            self.rows.labels(r.table, "deleted").inc(r.deleted)
            self.last_success.labels(r.table).set(now.timestamp())
        for name in failed:
            self.failures.labels(name).inc()

    def copy_progress(self, table: str, done: float, eta: float | None) -> None:
        """After each chunk of a copy (Job.on_copy): while it runs, not only after the run."""
        self.copy_done.labels(table).set(done)
        self.copy_eta.labels(table).set(-1.0 if eta is None else eta)

    def watched(self, table: str, through: float, since: str | None, differing: int) -> None:
        """After each slice of the watch (sync/watch.py)."""
        self.watch_round.labels(table).set(through)
        self.compared_since.labels(table).set(datetime.fromisoformat(since).timestamp() if since else 0.0)
        self.differing.labels(table).set(differing)

    def run_failed(self) -> None:
        self.run_failures.inc()
