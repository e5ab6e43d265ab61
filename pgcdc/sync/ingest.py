"""The ingest job for one table: batch after batch, queue -> enrichment -> apply + state.

A run takes each table up to the txmin it saw when it started (plus, in out-of-order
mode, the committed transactions above it). Runs of the same consumer exclude each other
through a lease on the primary. What a table needs (copy, apply, pass) is decided in
pgcdc/sync/plan.py, which engine applies a batch in pgcdc/engines; a copy of the whole table
is pgcdc/sync/copies.py; the loop over the tables, and the run's bookkeeping, is
pgcdc/sync/runs.py, which calls `Job.sync_table`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import psycopg

from pgcdc import faults
from pgcdc.engines import BatchWork, Chooser, Engine
from pgcdc.errors import TargetError
from pgcdc.lake import catalog, tablelog, target
from pgcdc.lake.state import committed_batch, load_state, read_state_file, state_from_history, write_state_file
from pgcdc.lake.target import Written
from pgcdc.settings import Settings
from pgcdc.source import access, enrich, events, partitions, snapshots
from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column, table_columns
from pgcdc.source.events import pending
from pgcdc.source.mirror import mark_committing, mirror_state, mirrored
from pgcdc.source.sessions import RunSource, SourceConnections, run_source
from pgcdc.spark import storage
from pgcdc.sync import copies, history_folds
from pgcdc.sync.context import RunContext
from pgcdc.sync.pass_cut import PassCut, leave
from pgcdc.sync.plan import (check_state, columns_changed, copy_reason, next_step, table_path,
                             with_mirror)
from pgcdc.sync.report import UNDEFINED_COLUMN, TableReport, first_line, source_state
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

_log = logging.getLogger(__name__)


CHUNKS_UNDER_WAY = "a copy in chunks is under way (each chunk reads in a snapshot of its own)"  # (out of a cut)


class ColumnsChanged(Exception):
    """A batch read found the table's columns changed since its run checked them."""


class Job:
    """One ingest run for one consumer."""

    def __init__(self, settings: Settings, spark: "SparkSession", say: Callable[[str], None] | None = None,
                 following: bool = False) -> None:
        """`say`: also hand every INFO line to this (tests keep them); `following`: a follower's
        runs, where a table's routine lines (engine, nothing to do) are DEBUG and the source
        connections are kept from one run to the next (`close` ends them)."""
        self.ctx = RunContext(settings, spark, say, following)  # what the steps it calls receive
        self.settings = settings
        self.spark = spark
        self.sink = say
        self.following = following
        self.interrupted: Callable[[], bool] = lambda: False  # a stop at once, the second signal (any error then is it)
        self.table_ids: dict[str, int] = {}  # the last run's tables
        self.known: dict[int, tuple[ConsumerState, str]] = {}  # by table id: its state and Delta table, as last synced
        self.compactor = self.ctx.compactor
        self.connections = SourceConnections(settings.source, keep=following)  # a follower's: kept between runs
        self.landing = self.ctx.landing
        # (refuses an engine this Delta build cannot run)
        self.chooser = Chooser(spark, settings.ingest.engine,
                               settings.target.history and not settings.target.change_data_feed)
        self.lanes: list[Job] = []  # Jobs beside this one applying tables at once (runs.lane_jobs), kept
        self.cut: PassCut | None = None  # the pass's cut (sync/pass_cut.py), shared with its lanes
        self.later: history_folds.Later | None = None  # the pass's fan-in histories, folded after its lanes
        storage.check_root(spark, settings.target.root)  # a remote root answers (reading only) before any table

    @property
    def stopping(self) -> Callable[[], bool]:
        """A stop request (a signal), seen between batches (and by the steps, through the context)."""
        return self.ctx.stopping

    @stopping.setter
    def stopping(self, asked: Callable[[], bool]) -> None:
        self.ctx.stopping = asked

    @property
    def on_copy(self) -> Callable[[str, float, float | None], None] | None:
        """A follower's gauges of a copy's progress: (table, done 0-1, seconds left)."""
        return self.ctx.on_copy

    @on_copy.setter
    def on_copy(self, gauge: Callable[[str, float, float | None], None] | None) -> None:
        self.ctx.on_copy = gauge

    @property
    def schemas(self) -> dict[int, tuple[object, "StructType"]]:
        """By table id: its columns and their Spark schema (shared with the run's lanes)."""
        return self.ctx.schemas

    @schemas.setter
    def schemas(self, kept: dict[int, tuple[object, "StructType"]]) -> None:
        self.ctx.schemas = kept

    def close(self) -> None:
        """Close the connections a follower's Job keeps between runs (its lanes' too)."""
        self.connections.close()
        for lane in self.lanes:
            lane.close()

    def say(self, message: str, level: int = logging.INFO, **values: object) -> None:
        """Log one line (with machine-readable `values` for the JSON format)."""
        self.ctx.say(message, level, **values)

    def routine(self, message: str) -> None:
        """A line a follower repeats every run: DEBUG there, INFO in a single run."""
        self.ctx.routine(message)

    @contextmanager
    def source(self, names: list[str], restored: bool = False) -> Iterator[RunSource]:
        """Connections (primary, reader) with the consumer's lease held, the tables, JDBC options and
        the database's identity (sessions.run_source)."""
        with run_source(self.connections, self.settings.consumer, names, restored, self.say) as found:
            yield found

    def open_table(self, primary: psycopg.Connection, reader: psycopg.Connection,
                   t: AttachedTable) -> tuple[str, bool, TableReport, list[Column]]:
        """Where the table's Delta table lies (and whether that place was recorded for it), its
        report, and its columns, once the reader may read it (access.check_readable)."""
        path, recorded = table_path(primary, self.settings.consumer, t, self.settings.target.root)
        access.check_readable(reader, t)
        return path, recorded, TableReport(t.name, path), table_columns(reader, t.name)

    def sync_table(self, primary: psycopg.Connection, reader: psycopg.Connection, jdbc: dict[str, str],
                   identity: str, t: AttachedTable) -> TableReport:
        s = self.settings
        path, recorded, report, columns = self.open_table(primary, reader, t)
        source = self.target_schema(jdbc, t, columns)
        copies.create_target(self.ctx, primary, t, path, source)
        target.check_owner(self.spark, path, s.consumer, None if recorded else t.target_name, t.into is not None)
        if s.target.database and (name := catalog.register(self.spark, s.target.database, t.target_name, path)):
            self.say(f"{t.name}: registered in the catalog as {name}")
        gone = tablelog.missing_files(self.spark, path)
        if gone:
            raise TargetError(f"{path} references data files that are gone ({', '.join(gone)}, ...): it cannot be read; "
                              "was it vacuumed with its retention check off while pgcdc wrote it? Run "
                              f"`pgcdc resync {t.name}` to write it again")
        cut = self.cut
        if cut is not None and not cut.enter(t.name):
            cut = leave(cut, t, cut.late(), self.routine)
        try:
            return self.sync(primary, reader, jdbc, identity, t, cut, path, report, columns, source)
        finally:
            if cut is not None:
                cut.exit(t.name)  # (a table that failed: it reads in the snapshot no more)

    def sync(self, primary: psycopg.Connection, reader: psycopg.Connection, jdbc: dict[str, str], identity: str,
             t: AttachedTable, cut: PassCut | None, path: str, report: TableReport, columns: list[Column],
             source: "StructType") -> TableReport:
        """sync_table's work once the table's Delta table is there and may be read: in the pass's
        `cut` if given."""
        s = self.settings
        key, fan_in = self.key(t), t.into is not None
        choice = self.chooser.choose(path)
        self.routine(f"{t.name}: {choice.line()}")
        if s.target.history:
            history_folds.catch_up_first(self.ctx, self.later, t, path)
        now = self.fingerprint(t, columns)
        quick = read_state_file(self.spark, path, key)
        copied = quick.columns if fan_in and quick is not None else ""  # (what its rows were copied with)
        why = copy_reason(primary, self.spark, s, t, path, source, copied, now)
        if why is not None:
            self.say(f"{t.name}: {why}: copying the table again")
            cut = leave(cut, t, f"copied in a snapshot of its own ({why})", self.routine)
            copies.copy_table(self.ctx, primary, reader, jdbc, identity, t, columns, path, report,
                              committed_batch(self.spark, path, key) or 0, choice.engine)
            quick = read_state_file(self.spark, path, key)
        mirror = mirrored(primary, s.consumer, [t.table_id]).get(t.table_id)
        if quick is not None and quick.copy is None:
            quick = with_mirror(quick, mirror)
            if cut is not None and (refused := cut.admits(t, quick)) is not None:
                cut = leave(cut, t, refused, self.routine)
            batch = self.plan(reader, quick, cut=cut)
            if batch is None or batch.events == 0:
                # Fast path for an idle table: the state file may only lag Delta after a crash
                # between the commit and the file write, and then the lagging state still sees
                # the committed batch's events as pending, so it is never idle.
                check_state(primary, quick, identity, t, path)
                return self.finish(primary, reader, t, self.moved(path, quick, batch), path, report,
                                   choice.engine, now, cut)
        state = load_state(self.spark, path, key)
        if state is not None:
            state = with_mirror(state, mirror)
        if state is None:
            cut = leave(cut, t, "copied in a snapshot of its own (its first copy)", self.routine)
            state = copies.copy_table(self.ctx, primary, reader, jdbc, identity, t, columns, path, report, 0, choice.engine)
        elif state.copy is not None:  # a copy in chunks that a kill or a stop left under way
            cut = leave(cut, t, CHUNKS_UNDER_WAY, self.routine)
            check_state(primary, state, identity, t, path)
            state = copies.resume_copy(self.ctx, primary, reader, jdbc, identity, t, columns, path, report, state,
                                       choice.engine)
        elif cut is not None and (refused := cut.admits(t, state)) is not None:
            cut = leave(cut, t, refused, self.routine)
        check_state(primary, state, identity, t, path)

        start: events.Snapshot | None = None
        compacted_at = 0  # (report.batches when the table's small files were last looked at)
        while state.copy is None:  # (a copy still under way: the job was asked to stop between its chunks)
            if cut is not None and not cut.open():
                cut = leave(cut, t, cut.late(), self.routine)
            with snapshots.reading(reader, None if cut is None else cut.held):
                snap = events.take_snapshot(reader)
                batch = self.plan(reader, state, snap)
                size = partitions.size(reader, t.name)
            start = start or snap
            assert start is not None
            if batch is None:
                break
            step = next_step(batch, size.rows, s.ingest.recopy_fraction)
            if step.kind == "copy":
                self.say(f"{t.name}: batch holds {step.why}: copying the table instead of applying the batch")
                cut = leave(cut, t, f"copied in a snapshot of its own (a batch holding {step.why})", self.routine)
                state = copies.copy_table(self.ctx, primary, reader, jdbc, identity, t, columns, path, report,
                                          state.batch, choice.engine)
                report.events += batch.events
                report.batches += 1
            elif step.kind == "pass":
                # nothing of this table below the new watermark: no Delta commit; the mirror
                # (written below) may move ahead: the events retention then drops are not this table's
                state = self.moved(path, state, batch)
            else:
                row_bytes = size.bytes / max(size.rows, 1)  # (rows is -1 before the first analyze)
                try:
                    state = self.apply_batch(choice.engine, primary, reader, jdbc, t, columns, batch, snap,
                                             row_bytes, state, path, report, cut)
                except ColumnsChanged as changed:  # DDL since the run began; the copy covers this batch
                    self.say(f"{t.name}: its columns changed while this run read it ({changed}): copying the "
                             "table again")
                    cut = leave(cut, t, f"copied in a snapshot of its own (its columns changed: {changed})", self.routine)
                    columns = table_columns(reader, t.name)
                    state = copies.copy_table(self.ctx, primary, reader, jdbc, identity, t, columns, path, report,
                                              state.batch, choice.engine)
                    report.events += batch.events
                    report.batches += 1
            if batch.next_txid is None or batch.next_txid >= self.horizon(start):  # (None: caught up)
                break
            if self.stopping():
                cut = leave(cut, t, "the run was asked to stop before the table caught up", self.routine)
                break
            if 0 < s.ingest.compact_files <= report.batches - compacted_at:  # a long backlog: compact on the way
                self.compactor.between_batches(path, t.name, s.ingest.compact_files, t.fan_in_shard)
                compacted_at = report.batches
        if state.copy is not None:
            cut = leave(cut, t, CHUNKS_UNDER_WAY, self.routine)
        if report.batches and not self.stopping():  # (each batch added files)
            self.compactor.after_batches(path, t.name, s.ingest.compact_files, t.fan_in_shard)
        return self.finish(primary, reader, t, state, path, report, choice.engine, now, cut)

    def resync_table(self, primary: psycopg.Connection, reader: psycopg.Connection, jdbc: dict[str, str],
                     identity: str, t: AttachedTable) -> TableReport:
        """Copy one table again from scratch (runs.resync_tables goes over the tables)."""
        s = self.settings
        path, recorded, report, columns = self.open_table(primary, reader, t)
        copies.create_target(self.ctx, primary, t, path, self.target_schema(jdbc, t, columns))
        target.check_owner(self.spark, path, s.consumer, None if recorded else t.target_name, t.into is not None)
        last = committed_batch(self.spark, path, self.key(t)) or 0
        engine = self.chooser.choose(path).engine
        state = copies.copy_table(self.ctx, primary, reader, jdbc, identity, t, columns, path, report, last, engine)
        return self.finish(primary, reader, t, state, path, report, columns=self.fingerprint(t, columns))

    def key(self, t: AttachedTable) -> str:
        """What the consumer's state of table `t` goes by in its Delta table (lake/state.py)."""
        return self.ctx.key(t)

    def fingerprint(self, t: AttachedTable, columns: list[Column]) -> str:
        """RunContext.fingerprint: what the table's state keeps of the columns checked."""
        return self.ctx.fingerprint(t, columns)

    def source_schema(self, jdbc: dict[str, str], t: AttachedTable, columns: list[Column]) -> "StructType":
        """The table's Spark schema as the sync reads it (RunContext.source_schema)."""
        return self.ctx.source_schema(jdbc, t, columns)

    def target_schema(self, jdbc: dict[str, str], t: AttachedTable, columns: list[Column]) -> "StructType":
        """The columns of the table's Delta table (RunContext.target_schema)."""
        return self.ctx.target_schema(jdbc, t, columns)

    def finish(self, primary: psycopg.Connection, reader: psycopg.Connection, t: AttachedTable,
               state: ConsumerState, path: str, report: TableReport, engine: Engine | None = None,
               columns: str = "", cut: PassCut | None = None) -> TableReport:
        """Bring the table's history up to its Delta table (lake/history.py), mirror the state (also
        tells `pgcdc status` this run happened), let the engine tidy its own files, and report.
        `columns`: the fingerprint of the columns its Delta table was checked against in this run,
        kept in the state file for the next passes (sync/idle.py); `cut`: the pass's cut, which the
        table joins at the version holding its state (found in its history for a state written
        by an older pgcdc)."""
        if cut is not None and state.version is None and (found := state_from_history(
                self.spark, path, state.key, state.batch)) is not None:
            state = replace(state, version=found.version)
            write_state_file(self.spark, path, state)
        if columns and state.columns != columns:
            state = replace(state, columns=columns)
            write_state_file(self.spark, path, state)
        if self.settings.target.history:
            history_folds.follow(self.ctx, self.later, t, path)
        mirror_state(primary, state, path)
        self.known[state.table_id] = (state, path)
        if engine is not None:
            engine.finish(path)
        report.watermark = state.watermark
        report.pending_events, report.oldest_pending = pending(reader, state)
        if cut is not None:
            cut.join(t, path, state)
        if report.wrote:
            self.say(report.line(), logging.INFO, **report.fields())
        else:
            self.routine(report.line())
        return report

    def moved(self, path: str, state: ConsumerState, batch: events.Batch | None) -> ConsumerState:
        """The state once a batch without events (or none) is passed, also kept in the state file,
        so what a run prints and mirrors is what the next run starts from (it never goes down).
        It is as true as the committed state: the table had no events in between."""
        moved = _moved(state, batch)
        if moved != state:
            write_state_file(self.spark, path, moved)
        return moved

    def horizon(self, start: events.Snapshot) -> int:
        """Where one run stops for a table while writers go on: once everything below the txmin
        it started with is applied (strict mode), or every transaction that had begun by then
        (out-of-order mode). Later transactions are the next run's."""
        return start.xmax if self.settings.ingest.mode == "out_of_order" else start.txmin

    def plan(self, reader: psycopg.Connection, state: ConsumerState, snap: events.Snapshot | None = None,
             cut: PassCut | None = None) -> events.Batch | None:
        """The next batch from `state` on, in the reader's current snapshot `snap` (or in the
        pass's snapshot, `cut`, or in a snapshot of its own)."""
        s = self.settings.ingest
        if snap is None:
            with snapshots.reading(reader, None if cut is None else cut.held):
                return self.plan(reader, state, events.take_snapshot(reader))
        return events.plan_batch(reader, snap, state, out_of_order=s.mode == "out_of_order",
                                 max_events=s.max_events_per_batch, max_keys=s.max_keys_per_batch)

    def apply_batch(self, engine: Engine, primary: psycopg.Connection, reader: psycopg.Connection,
                    jdbc: dict[str, str], t: AttachedTable, columns: list[Column], batch: events.Batch,
                    snap: events.Snapshot, row_bytes: float, state: ConsumerState, path: str,
                    report: TableReport, cut: PassCut | None = None) -> ConsumerState:
        """Apply one batch with `engine`, then copy its state next to the table and into PostgreSQL.
        In a pass's cut, every read of the batch's rows (Spark's and the driver's) is in its snapshot
        (the queue's rows of a batch are the same in any later one)."""
        s = self.settings.ingest
        began = time.monotonic()
        partitions = enrich.batch_partitions(batch.keys, s.small_batch_keys, s.jdbc_partitions,
                                             self.spark.sparkContext.defaultParallelism)
        new_state = batch.next_state(state)

        def check(schema: "StructType") -> None:  # the JDBC relation's columns, once Spark reads it
            changed = columns_changed(self.spark, self.settings, t, path, self.landing.schema(schema)) \
                if t.into is None else \
                target.schema_change(self.source_schema(jdbc, t, columns), schema)
            if changed is not None:
                raise ColumnsChanged(changed)

        def read() -> enrich.BatchRead:
            # the rows' schema is the one this run checked against the Delta table (same columns)
            rows = enrich.read_batch(self.spark, jdbc, t, columns, batch, partitions, snap.replayed,
                                     self.source_schema(jdbc, t, columns), check, txids=self.landing.metadata,
                                     snapshot=None if cut is None else cut.held.exported)
            faults.failpoint("before-merge")
            return rows

        try:
            written = engine.apply(BatchWork(self.spark, path, t, columns, batch, reader, row_bytes, s, new_state,
                                             read, lambda: mark_committing(primary, new_state, path), self.landing,
                                             None if cut is None else cut.held))
        except Exception as exc:  # a column renamed or dropped after the run checked them: a copy covers it
            if source_state(exc) != UNDEFINED_COLUMN:
                raise
            raise ColumnsChanged(first_line(exc)) from exc
        faults.failpoint("after-merge")
        new_state = self.committed(primary, path, new_state, written)
        seconds = round(time.monotonic() - began, 3)
        self.say(f"{t.name}: batch {new_state.batch} applied by {engine.name}: {batch.events} events, {batch.keys} keys, "
                 f"{written.upserted} upserted, {written.deleted} deleted; watermark {new_state.watermark} "
                 f"({seconds:.2f} s)", record="batch", table=t.name, batch=new_state.batch, engine=engine.name,
                 events=batch.events, keys=batch.keys, upserted=written.upserted, deleted=written.deleted,
                 watermark=new_state.watermark, seconds=seconds)
        report.batches += 1
        report.events += batch.events
        report.upserted += written.upserted
        report.deleted += written.deleted
        return new_state

    def committed(self, primary: psycopg.Connection, path: str, state: ConsumerState, written: Written,
                  copied: bool = False) -> ConsumerState:
        """After a Delta commit: RunContext.committed (the files checked, the state kept)."""
        return self.ctx.committed(primary, path, state, written, copied)


def _moved(state: ConsumerState, batch: events.Batch | None) -> ConsumerState:
    """The state once a batch without events (or none) is passed (ConsumerState.passed)."""
    return state if batch is None else state.passed(batch.hi, batch.extra)
