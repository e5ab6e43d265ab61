"""The loop over a consumer's tables, and the entry points that run it: one run over the
tables (each failing alone, `run_tables`), a resync of some of them, the checks before Spark
starts. What one table needs is decided in `plan` and done by `ingest.Job`; this module is
the only one that goes over the tables, and nothing it calls calls back into it."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, TypeVar

import psycopg

from pgcdc import records
from pgcdc.errors import PgcdcError, StoppedError
from pgcdc.lake.paths import check_target_root
from pgcdc.log import fields
from pgcdc.settings import Settings
from pgcdc.source import capture, consumers, events, schemas
from pgcdc.source.selection import canonical, select_tables
from pgcdc.source.capture import AttachedTable
from pgcdc.source.consumers import record_run
from pgcdc.source.db import connect
from pgcdc.source.mirror import mirrored, register_table
from pgcdc.source.sessions import RunSource
from pgcdc.spark.session import activate, get_session, pinned_threads, side_session
from pgcdc.sync import history_folds, pass_cut
from pgcdc.sync.pass_cut import PassCut
from pgcdc.sync.plan import table_path
from pgcdc.sync.departed import remove_departed
from pgcdc.sync.idle import pass_idle
from pgcdc.sync.ingest import Job
from pgcdc.sync.report import RACED, TableReport, raced
from pgcdc.errors import first_line
from pgcdc.sync.signals import Stopper

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)
LEASE_WAIT = 120.0  # seconds a resync waits for another worker to finish a table


T = TypeVar("T")


def run(settings: Settings, spark: "SparkSession | None" = None,
        say: Callable[[str], None] | None = None) -> list[TableReport]:
    """Run the ingest job once (see `once`)."""
    return once(settings, spark, say, settings.tables, "the run", run_job)


def resync(settings: Settings, tables: list[str], spark: "SparkSession | None" = None,
           say: Callable[[str], None] | None = None) -> list[TableReport]:
    """Copy tables again from scratch into their Delta tables (see `resync_tables`, `once`)."""
    return once(settings, spark, say, tables, "the resync", lambda job: resync_tables(job, tables))


def once(settings: Settings, spark: "SparkSession | None", say: Callable[[str], None] | None, tables: list[str],
         what: str, work: Callable[[Job], list[T]], restored: bool = False) -> list[T]:
    """A one-shot `work` in a local Spark session unless given one. A first SIGTERM/SIGINT (a
    scheduler's timeout) stops it after the batch in flight (StoppedError), a second at once.
    (Seven parameters: `run`, `resync` and reset-watermark differ in what they name, do and check
    before Spark; `restored`: reset-watermark's, checked as after a restore.)"""
    if spark is None:
        preflight(settings, tables, restored=restored)
    job = Job(settings, spark or get_session(settings.spark, target_root=settings.target.root), say)
    with Stopper().installed() as stop:
        job.stopping, job.interrupted = stop, lambda: stop.at_once
        reports = work(job)
    if stop():
        raise StoppedError(f"{what} stopped on {stop.signal_name} after the batch in flight ({len(reports)} table(s) "
                           "done); what it committed stays, and the next run goes on from there")
    return reports


def run_job(job: Job) -> list[TableReport]:
    """Sync every table once; raise the first table's failure after trying them all."""
    reports, failed = run_tables(job)
    if failed:
        raise next(iter(failed.values()))  # (every failed table was named in the log and is in `pgcdc status`)
    return reports


def resync_tables(job: Job, names: list[str]) -> list[TableReport]:
    """Copy the given tables again from scratch (after a detach/attach or a schema change)."""
    return leased_tables(job, names, lambda src, t, sync: job.resync_table(src, t))




def leased_tables(job: Job, names: list[str], work: "Callable[[RunSource, AttachedTable, Callable[[], TableReport]], T]",
                  restored: bool = False) -> list[T]:
    """`work(src, t, sync)` for each of the tables, one at a time, each under its lease (no other
    worker applies it meanwhile; a restore's holds the whole consumer): `sync()` runs the table's
    sync (Job.sync_table), for a command built on the run that needs it (checks/repair.py)."""
    consumer = job.settings.consumer
    with job.source(names, restored) as src:
        primary, done = src.primary, []
        for t in src.tables:
            if job.stopping():
                break
            if not restored:  # (a restore's resync holds the whole consumer)
                consumers.lease_waiting(primary, consumer, t.table_id, t.name, LEASE_WAIT)
            try:
                done.append(work(src, t, lambda: job.sync_table(src, t)))  # noqa: B023 (called at once)
            finally:
                if not restored and not primary.broken:
                    consumers.unlease(primary, consumer, [t.table_id])
        return done


def run_tables(job: "Job", skip: frozenset[str] = frozenset()) -> tuple[list[TableReport], dict[str, Exception]]:
    """Sync every table once, except `skip` (tables a follower holds back after failures):
    the reports, and the tables that failed with their errors. One table's failure never
    holds the others back; a lost connection or an interrupt ends the run."""
    began = time.monotonic()
    with job.source(job.settings.tables) as src:
        job.table_ids = {t.name: t.table_id for t in src.tables}
        for line in remove_departed(job.spark, src.primary, job.settings.consumer,
                                    job.settings.target.root):  # (fan-ins' sources)
            job.say(line)
        if not src.tables:
            job.say("no tables attached; run `pgcdc attach SCHEMA.TABLE` first")
            return [], {}
        with src.reader.transaction():
            start = events.take_snapshot(src.reader)
        record_run(src.primary, job.settings.consumer, started=canonical(src.primary, job.settings.tables))
        for line in schemas.uncaptured_problems(src.primary):
            job.say(line, logging.WARNING)
        try:
            work = _pass(job, src, skip)
            for action, part in capture.maintain(src.primary):
                job.routine(f"queue: {action} {part}")
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt):  # (a stop at once does not wait for it)
                with suppress(Exception):
                    job.ctx.compactor.wait()
            with suppress(psycopg.Error):  # (the connection may be what failed)
                record_run(src.primary, job.settings.consumer, error=first_line(exc))
            raise
        _record_pass(job, src, skip, work, start.txmin)
    _log_run(job, work, time.monotonic() - began)
    return work.reports, work.failed


def _pass(job: Job, src: RunSource, skip: frozenset[str]) -> "_Pass":
    """One pass over the tables: the idle ones left alone, the others applied in lanes, oldest
    pending change first, in the pass's cut (written once they are done), then the histories
    folded once a pass (a fan-in's)."""
    live = [t for t in src.tables if t.name not in skip]
    later = history_folds.Later()
    with _cut(job, src.primary, src.tables) as cut:
        job.cut, job.later = cut, later
        for t in src.tables:
            if t.name in skip and cut is not None:
                cut.leave(t, "held back after failures")
        try:
            passed, oldest = _idle(job, src, live)
            # the table whose oldest pending change is oldest first (one never looked at before all);
            # in a cut, a table's first copy last (one in chunks lets the pass's snapshot go)
            work = _Pass(sorted((t for t in live if t.name not in passed),
                                key=lambda t: (cut is not None and cut.mirrors.get(t.table_id, (0, None))[0] == 0,
                                               oldest.get(t.table_id, 0))))
            work.reports.extend(passed.values())
            _apply_in_lanes(job, src, work)
        finally:
            job.cut, job.later = None, None
    if cut is not None:
        _record_cut(job, src.primary, cut, src.tables)
    work.failed.update(history_folds.fold_later(job.ctx, later))
    if work.elsewhere:
        job.routine(f"{len(work.elsewhere)} table(s) left to the consumer's other workers, which are applying "
                    f"them: {', '.join(work.elsewhere)}")
    return work


def _record_pass(job: Job, src: RunSource, skip: frozenset[str], work: "_Pass", start_txmin: int) -> None:
    """Record the pass in pgcdc.consumer_run for `pgcdc status`: the tables that failed or were
    held back, or the txmin every table reached."""
    consumer, failed = job.settings.consumer, work.failed
    held = [t.name for t in src.tables if t.name in skip]
    tried = [r.table for r in work.reports] + list(failed)
    if failed or held:
        summary = "; ".join([f"{name}: {first_line(exc)}" for name, exc in failed.items()]
                            + [f"{name}: held back after failures" for name in held])
        record_run(src.primary, consumer, tried=tried,
                   error=f"{len(failed) + len(held)} of {len(src.tables)} table(s) failed: {summary}",
                   failed={name: first_line(exc) for name, exc in failed.items()}
                   | {name: "held back after failures" for name in held})
    else:  # (a run stopped part-way, or sharing tables with other workers, leaves the txmin all tables reached)
        record_run(src.primary, consumer, tried=tried,
                   start_txmin=None if job.stopping() or work.elsewhere else start_txmin)


def _log_run(job: Job, work: "_Pass", seconds: float) -> None:
    reports, failed = work.reports, work.failed
    events_, batches = sum(r.events for r in reports), sum(r.batches for r in reports)
    _log.log(logging.INFO if any(r.wrote for r in reports) or failed or not job.ctx.following else logging.DEBUG,
             "run of consumer %s: %d table(s) synced, %d failed; %d events in %d batches (%.2f s)",
             job.settings.consumer, len(reports), len(failed), events_, batches, seconds,
             extra=fields(records.Run(job.settings.consumer, len(reports), sorted(failed), batches, events_,
                                      sum(r.upserted for r in reports), sum(r.deleted for r in reports),
                                      round(seconds, 3))))


@contextmanager
def _cut(job: Job, primary: psycopg.Connection, tables: list[AttachedTable]) -> Iterator[PassCut | None]:
    """The pass's cut (sync/pass_cut.py): its snapshot held on a reader connection of its own while the
    pass reads; None where passes make no cut (strict mode, or ingest.cuts off)."""
    s = job.settings
    if not (s.ingest.cuts and s.ingest.mode == "out_of_order"):
        yield None
        return
    _register_first_copies(job, primary, tables)
    with pass_cut.taken(primary, lambda: connect(s.source.reader_dsn, role=s.source.reader_role, reader=True),
                        s.consumer, tables, s.ingest.cut_seconds) as cut:
        yield cut


def _register_first_copies(job: Job, primary: psycopg.Connection, tables: list[AttachedTable]) -> None:
    """Register the tables the consumer never synced before the pass takes its snapshot, so that
    their first copies (whole, a chunk at most) may read in it and join its cut: queue retention
    then keeps their events from before it (register_table). A table whose place is refused
    (plan.table_path) is left to its sync, which says why."""
    s = job.settings
    have = mirrored(primary, s.consumer, [t.table_id for t in tables])
    for t in tables:
        if t.table_id in have:
            continue
        try:
            path, _ = table_path(primary, s.consumer, t, s.target.root)
        except PgcdcError:
            continue
        register_table(primary, s.consumer, t.table_id, path)


def _record_cut(job: Job, primary: psycopg.Connection, cut: PassCut, tables: list[AttachedTable]) -> None:
    """Write the pass's cut to the lake and say what it holds."""
    pass_cut.drop_truncated(primary, cut)
    made = pass_cut.write(job.spark, job.settings.target.root, job.settings.consumer, cut, tables,
                          capture.list_attached(primary))
    line = f"cut {made.name}: {len(made.tables)} Delta table(s) agree as of one snapshot"
    if made.left_out:
        job.say(f"{line}; left out: " + "; ".join(f"{n}: {why}" for n, why in sorted(made.left_out.items())),
                record=records.Cut(made.name, len(made.tables), sorted(made.left_out)))
    else:
        job.routine(line)


class _Pass:
    """What the lanes of one pass share: the tables left to apply, in order, and what came of
    them (list appends and dict stores: safe across threads)."""

    def __init__(self, tables: list[AttachedTable]) -> None:
        self.todo = deque(tables)
        self.lock = threading.Lock()
        self.reports: list[TableReport] = []
        self.failed: dict[str, Exception] = {}  # tables that failed, with their errors
        self.elsewhere: list[str] = []  # tables another worker of the consumer is applying

    def next(self) -> AttachedTable | None:
        with self.lock:
            return self.todo.popleft() if self.todo else None

    def end(self) -> None:
        """Hand out no more tables (a lane's connection broke, or a stop at once)."""
        with self.lock:
            self.todo.clear()


def _apply_in_lanes(job: Job, src: RunSource, work: _Pass) -> None:
    """Apply the pass's tables: in this thread, and in up to `[ingest] parallel_tables` - 1 lanes
    beside it (lane_jobs), each taking the next table as it is free. A lane that fails as a
    whole (its connection, a stop at once) ends the pass after the tables in flight."""
    wanted = job.settings.ingest.parallel_tables if pinned_threads() else 1  # (activate needs pinned threads)
    lanes = lane_jobs(job, max(0, min(wanted, len(work.todo)) - 1))
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_lane, args=(lane, work, errors), name=f"pgcdc-lane-{i + 1}", daemon=True)
               for i, lane in enumerate(lanes)]
    for thread in threads:
        thread.start()
    try:
        _apply(job, src, work)
    except KeyboardInterrupt:  # (a stop at once: the daemon lanes end with the process)
        work.end()
        raise
    except BaseException:
        work.end()
        _join(threads)
        raise
    _join(threads)
    if errors:
        raise errors[0]


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()


def _lane(job: Job, work: _Pass, errors: list[BaseException]) -> None:
    """One lane: a worker of the consumer with source connections of its own, committing with
    its own Spark session's confs (spark.session.activate)."""
    try:
        activate(job.spark)
        with job.source(job.settings.tables) as src:
            try:
                _apply(job, src, work)
            except BaseException:
                with suppress(Exception):
                    job.ctx.compactor.wait()
                raise
    except BaseException as exc:  # (raised by the pass, in the run's thread)
        work.end()
        errors.append(exc)


def _apply(job: Job, src: RunSource, work: _Pass) -> None:
    """The one loop over tables, in each lane: take the pass's next table, lease it (another
    worker may be applying it) and sync it. One table's failure never holds the others back;
    a lost connection or an interrupt ends the lane. The leases go once the lane's
    compaction is done (the next run may write the table)."""
    consumer, primary, reader = job.settings.consumer, src.primary, src.reader
    leased: list[int] = []
    while not job.stopping() and (t := work.next()) is not None:
        if not consumers.lease(primary, consumer, [t.table_id]):
            work.elsewhere.append(t.name)
            if job.cut is not None:
                job.cut.leave(t, "another worker of the consumer was applying it")
            continue
        leased.append(t.table_id)
        try:
            work.reports.append(job.sync_table(src, t))
        except Exception as exc:  # one table's problem never holds the others back
            if primary.broken or reader.broken or job.interrupted():
                raise  # (the connection itself, or a stop at once: no other table goes on)
            job.say(f"{t.name}: FAILED: {first_line(exc)}{RACED if raced(exc) else ''}", logging.ERROR,
                    records.TableFailed(t.name, first_line(exc)))
            work.failed[t.name] = exc
            if job.cut is not None:
                job.cut.leave(t, f"it failed: {first_line(exc)}")
    job.ctx.compactor.wait()
    consumers.unlease(primary, consumer, leased)


def lane_jobs(job: Job, n: int) -> list[Job]:
    """`n` Jobs beside `job` for `[ingest] parallel_tables`: each with its own source connections
    (a worker of the consumer of its own), compactor and Spark session on the same SparkContext
    (side_session: what one sets around a commit never lands in another's), sharing what `job`
    knows of each table; kept in `job.lanes` for a follower's next runs."""
    while len(job.lanes) < n:
        lane = Job(job.settings, side_session(job.spark, job.settings.spark.conf), job.ctx.sink, job.ctx.following)
        lane.known, lane.schemas = job.known, job.schemas
        job.lanes.append(lane)
    for lane in job.lanes[:n]:
        lane.stopping, lane.interrupted, lane.on_copy, lane.cut = job.stopping, job.interrupted, job.on_copy, job.cut
        lane.later = job.later
    return job.lanes[:n]


def _idle(job: Job, src: RunSource, tables: list[AttachedTable]) -> tuple[dict[str, TableReport], dict[int, int]]:
    """The idle tables a pass leaves alone, of those no other worker holds, and the oldest
    pending txid of the others it looked at (sync/idle.py); none if looking fails (each table's
    full path then meets the problem on its own), unless a connection broke."""
    consumer, primary, reader = job.settings.consumer, src.primary, src.reader
    got = consumers.lease(primary, consumer, [t.table_id for t in tables])
    try:
        return pass_idle(job.ctx, job.known, job.cut, src, [t for t in tables if t.table_id in got])
    except Exception as exc:
        if primary.broken or reader.broken or job.interrupted():
            raise
        _log.debug("looking for idle tables failed (%s): every table takes the full path", first_line(exc))
        return {}, {}
    finally:
        if not primary.broken:
            consumers.unlease(primary, consumer, sorted(got))


def preflight(settings: Settings, tables: list[str], lock: bool = True, restored: bool = False) -> None:
    """What can be checked without Spark, before its 10-30 s start: the source answers, pgcdc is
    installed at the right version, the tables to sync are attached, no other run holds the
    consumer whole (`lock`; a worker may join it, or the whole of it if `restored`; BusyError
    within seconds; the run takes it again once Spark is up),
    a local target is writable."""
    with connect(settings.source.dsn) as conn:
        select_tables(conn, tables)
        if lock:  # (released with the connection)
            consumers.lock(conn, settings.consumer) if restored else consumers.join(conn, settings.consumer)
    check_target_root(settings.target.root)
