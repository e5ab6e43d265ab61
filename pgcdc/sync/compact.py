"""`pgcdc compact`: OPTIMIZE and VACUUM of the consumer's Delta tables, never beside a batch.

Small batches leave many small files (and deletion vectors); OPTIMIZE rewrites them into
few, VACUUM then deletes the files no version within the retention needs. Both hold the
table's lease from the consumer's workers (sql/functions/worker_lock.sql), so they never
overlap a run's batches of the same table (a follower leaves it to the next pass). The
retention is Delta's own check: the table's `delta.deletedFileRetentionDuration` (7 days
unless set) or longer, so a reader of an older version within it keeps its files. pgcdc's
own files beside the table (`_pgcdc/`, the fast engine's key indexes) are left alone by
VACUUM; a key index whose data file went is dropped by the next run. Runs themselves
compact a table's small files once there are many (`[ingest] compact_files`, with
`optimize` below); VACUUM is left to this command.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgcdc import faults, records
from pgcdc.errors import ConfigError, TargetError
from pgcdc.lake import history, shards, tablelog, target
from pgcdc.log import fields
from pgcdc.settings import Settings
from pgcdc.source import capture, consumers
from pgcdc.source.selection import select_tables
from pgcdc.source.capture import AttachedTable
from pgcdc.source.db import connect
from pgcdc.spark.jvm import SideThread
from pgcdc.spark.session import side_session
from pgcdc.sync import plan
from pgcdc.sync.plan import table_path
from pgcdc.errors import first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)
_SIDE = SideThread("pgcdc-compact")  # (one for the process: each thread that calls the JVM keeps a JVM thread)

LOCK_WAIT = 300.0  # seconds a compaction waits for a worker of the consumer to finish a table


@dataclass
class Compacted:
    table: str
    path: str
    files_removed: int = 0
    files_added: int = 0
    vacuumed: int = 0

    def line(self) -> str:
        return (f"{self.table}: OPTIMIZE rewrote {self.files_removed} file(s) into {self.files_added}; VACUUM "
                f"deleted {self.vacuumed} file(s) no longer needed -> {self.path}")


def compact(settings: Settings, spark: "SparkSession", names: list[str], retain_hours: float | None = None,
            wait: float = LOCK_WAIT) -> list[Compacted]:
    """OPTIMIZE then VACUUM each named table (default: the consumer's), each leased from the
    consumer's workers meanwhile (a run applies it before or after, never beside)."""
    done = []
    with connect(settings.source.dsn) as conn:
        capture.require_schema(conn)
        consumers.join(conn, settings.consumer)  # (a worker of the consumer: it leases each table it compacts)
        for t in select_tables(conn, names or settings.tables):
            consumers.lease_waiting(conn, settings.consumer, t.table_id, t.name, wait)
            try:
                done += _compact_one(settings, spark, conn, t, retain_hours)
            finally:
                consumers.unlease(conn, settings.consumer, [t.table_id])
    return done


def _compact_one(settings: Settings, spark: "SparkSession", conn: Any, t: AttachedTable,
                 retain_hours: float | None) -> list[Compacted]:
    """OPTIMIZE then VACUUM one table's Delta table, and its history if it has one (none: not
    synced yet)."""
    path, recorded = table_path(conn, settings.consumer, t, settings.target.root)
    if not target.is_delta(spark, path):
        _log.info("%s: not synced yet by consumer %s; nothing to compact", t.name, settings.consumer)
        return []
    target.check_owner(spark, path, settings.consumer, None if recorded else t.target_name, t.into is not None)
    done = [_compact_path(spark, t.name, path, _part(t.fan_in_shard), retain_hours)]
    if target.is_delta(spark, kept := history.history_path(path)):  # (docs/history.md)
        done.append(_compact_path(spark, f"{t.name} (history)", kept, None, retain_hours))
    return done


def _compact_path(spark: "SparkSession", name: str, path: str, where: str | None,
                  retain_hours: float | None) -> Compacted:
    from delta.tables import DeltaTable

    began = time.monotonic()
    result = Compacted(name, path)
    result.files_removed, result.files_added = optimize(spark, path, where=where)
    result.vacuumed = _vacuum(spark, DeltaTable.forPath(spark, path), path, retain_hours)
    seconds = round(time.monotonic() - began, 3)
    _log.info(result.line(), extra=fields(records.Compact(name, path, seconds, result.files_removed,
                                                          result.files_added, result.vacuumed)))
    return result


class Compactor:
    """Compacts the small files of a run's tables beside the run (`after_batches`), one
    table at a time, so the other tables' batches go on meanwhile: on pgcdc's side thread
    and in a session of its own (spark.side_session: the run's state confs never reach an
    OPTIMIZE commit). The run waits for it (`wait`) before it lets the table's lease go,
    so a compaction never overlaps another run's batches of the same table."""

    def __init__(self, spark: "SparkSession", conf: dict[str, str]) -> None:
        self.spark, self.conf = spark, conf
        self.session: "SparkSession | None" = None
        self.running: "Future[Compacted | None] | None" = None

    def after_batches(self, path: str, name: str, compact_files: int, shard: int | None = None) -> None:
        """After a run applied batches to the table at `path`: compact its small files if
        plan.compact_reason says so. One table a run, so the others' batches share the
        machine with one OPTIMIZE at most (tables synced at the same pace come due together);
        another waits for a later run, unless it has twice as many small files. A fan-in source's
        (`shard`): its own partition's files alone, which no other source's batch touches."""
        if compact_files <= 0:
            return
        log = tablelog.read_state(self.spark, path, need_txns=False)
        why = plan.compact_reason(log, compact_files, shard)
        if why is None:
            return
        if self.running is not None:  # (this run's: `wait` at the run's end clears it)
            if plan.compact_reason(log, 2 * compact_files, shard) is None:
                return
            self.running.result()
        if self.session is None:
            self.session = side_session(self.spark, self.conf)
        session = self.session
        self.running = _SIDE.submit(lambda: small_files(session, path, name, why, shard))

    def between_batches(self, path: str, name: str, compact_files: int, shard: int | None = None) -> None:
        """In a run working through a long backlog, after `compact_files` more batches of the
        table: compact its small files now if they are due, and wait for it (an OPTIMIZE
        beside the table's next batch would conflict with it), so each batch reads and
        rewrites a bounded number of files however long the run."""
        log = tablelog.read_state(self.spark, path, need_txns=False)
        why = plan.compact_reason(log, compact_files, shard)
        if why is None:
            return
        self.wait()
        if self.session is None:
            self.session = side_session(self.spark, self.conf)
        small_files(self.session, path, name, why, shard)

    def wait(self) -> "Compacted | None":
        """Wait for the compaction in flight, if any; its result (a crash in it is raised here)."""
        running, self.running = self.running, None
        return None if running is None else running.result()


def small_files(spark: "SparkSession", path: str, name: str, why: str, shard: int | None = None) -> Compacted | None:
    """Compact the table's small files (`why`: how many). A failure (another writer's commit
    meanwhile) is logged and left to a later run: the batches are committed, so it never
    fails the sync."""
    began = time.monotonic()
    try:
        removed, added = optimize(spark, path, plan.SMALL_FILE, _part(shard))
    except Exception as exc:
        _log.warning("%s: compacting its %s failed (%s); a later run tries again", name, why, first_line(exc))
        return None
    faults.failpoint("after-compact")
    seconds = round(time.monotonic() - began, 3)
    _log.info("%s: %s: OPTIMIZE rewrote %d file(s) into %d (%.2f s)", name, why, removed, added, seconds,
              extra=fields(records.Compact(name, path, seconds, removed, added, 0)))
    return Compacted(name, path, removed, added)


def optimize(spark: "SparkSession", path: str, below: int | None = None, where: str | None = None) -> tuple[int, int]:
    """Delta's OPTIMIZE (public API) of the table at `path` (of its partitions `where` says):
    its files under `below` bytes only (and any with many deleted rows), or all under Delta's
    own 1 GiB bound; (files removed, files added)."""
    from delta.tables import DeltaTable

    confs = {} if below is None else {"spark.databricks.delta.optimize.minFileSize": str(below)}
    with target.session_confs(spark, confs):
        builder = DeltaTable.forPath(spark, path).optimize()
        if where is not None:
            builder = builder.where(where)
        metrics = builder.executeCompaction().collect()[0]["metrics"]
    return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])


def _part(shard: int | None) -> str | None:
    """The partition a fan-in source's compaction keeps to (its own), or None (the whole table)."""
    return None if shard is None else shards.where(shard)


def _vacuum(spark: "SparkSession", table: Any, path: str, retain_hours: float | None) -> int:
    """VACUUM with the table's retention (or `retain_hours`, which Delta refuses below it); how
    many files it deleted (from the VACUUM END entry in the table's history)."""
    from py4j.protocol import Py4JJavaError

    try:
        table.vacuum() if retain_hours is None else table.vacuum(retain_hours)
    except Py4JJavaError as exc:
        text = str(exc.java_exception)
        if retain_hours is not None and "retention" in text.lower():  # (Delta's retentionDurationCheck)
            raise ConfigError(f"--retain-hours {retain_hours:g} is below the retention of {path} (its "
                              "delta.deletedFileRetentionDuration, 7 days unless set): readers of older versions "
                              "could lose their files; use a longer retention, or lower the table property "
                              "if no reader needs them") from None
        raise TargetError(f"VACUUM of {path} failed: {text.splitlines()[0][:300]}") from None
    last = table.history(1).select("operation", "operationMetrics").collect()
    if last and last[0]["operation"] == "VACUUM END":
        return int((last[0]["operationMetrics"] or {}).get("numDeletedFiles", 0))
    return 0
