"""The ingest job for one table: its sync as steps, read top to bottom in `Job.sync`.

A run takes each table up to the txmin it saw when it started (plus, in out-of-order mode, the
committed transactions above it). Runs of the same consumer exclude each other through a lease
on the primary. A table's turn (`Job.sync_table`, then `Job.sync`): a copy (or a reconcile by
range) its columns, options or a lapse past the retention limit ask for (step 1), the fast path
of a table with nothing to apply (2), the state its batches start from: a first copy, a table
attached again or adopted reconciled by range, a copy in chunks resumed (3), batch after batch
(4), then the finish: history, mirrored state, report. What a table needs is decided in
pgcdc/sync/plan.py; a copy is pgcdc/sync/copies.py (in chunks: chunked_copy.py), a reconcile
pgcdc/sync/reconcile.py; one batch is pgcdc/sync/batch_step.py (applied: pgcdc/sync/apply.py,
by the engine pgcdc/engines picks). Every step receives the run's context (sync/context.py)
and the table's work (`TableWork`), never the Job. The loop over the tables, and the run's
bookkeeping, is pgcdc/sync/runs.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import psycopg

from pgcdc.engines import Chooser, Engine
from pgcdc.errors import TargetError
from pgcdc.lake import catalog, tablelog, target
from pgcdc.lake.state import committed_batch, load_state, read_state_file, state_from_history, write_state_file
from pgcdc.lake.target import Written
from pgcdc.records import Record
from pgcdc.settings import Settings
from pgcdc.source import access, events, partitions, snapshots
from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column, table_columns
from pgcdc.source.events import pending
from pgcdc.source.mirror import mirror_state, mirrored
from pgcdc.source.sessions import RunSource, SourceConnections, run_source
from pgcdc.spark import storage
from pgcdc.sync import copies, history_folds, reconcile
from pgcdc.sync.apply import Planned
from pgcdc.sync.batch_step import batch_step, moved
from pgcdc.sync.context import RunContext, TableWork
from pgcdc.sync.evolution import in_place
from pgcdc.sync.pass_cut import PassCut, leave
from pgcdc.sync.plan import Recopy, check_state, copy_reason, table_path, with_mirror
from pgcdc.sync.report import TableReport
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from pgcdc.source.mirror import Mirrored

_log = logging.getLogger(__name__)


CHUNKS_UNDER_WAY = "a copy in chunks is under way (each chunk reads in a snapshot of its own)"  # (out of a cut)


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
        self.interrupted: Callable[[], bool] = lambda: False  # a stop at once, the second signal (any error then is it)
        self.table_ids: dict[str, int] = {}  # the last run's tables
        self.known: dict[int, tuple[ConsumerState, str]] = {}  # by table id: its state and Delta table, as last synced
        self.connections = SourceConnections(settings.source, keep=following)  # a follower's: kept between runs
        # (refuses an engine this Delta build cannot run)
        self.chooser = Chooser(spark, settings.ingest.engine,
                               settings.target.history and not settings.target.change_data_feed)
        self.lanes: list[Job] = []  # Jobs beside this one applying tables at once (runs.lane_jobs), kept
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
    def cut(self) -> PassCut | None:
        """The pass's cut (sync/pass_cut.py), shared with its lanes; None between passes."""
        return self.ctx.cut

    @cut.setter
    def cut(self, cut: PassCut | None) -> None:
        self.ctx.cut = cut

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

    def say(self, message: str, level: int = logging.INFO, record: Record | None = None) -> None:
        """Log one line (with its machine-readable `record` for the JSON format)."""
        self.ctx.say(message, level, record)

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

    def sync_table(self, src: RunSource, t: AttachedTable) -> TableReport:
        """One table's turn in the pass: its Delta table made (or checked: its owner, its files),
        then `sync`, in the pass's cut while it may still read in its snapshot."""
        s = self.settings
        path, recorded, report, columns = self.open_table(src.primary, src.reader, t)
        schema = self.ctx.target_schema(src.jdbc, t, columns)
        copies.create_target(self.ctx, src.primary, t, path, schema, columns)
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
            return self.sync(TableWork.of(src, t, columns, path, report), cut, schema)
        finally:
            if cut is not None:
                cut.exit(t.name)  # (a table that failed: it reads in the snapshot no more)

    def sync(self, w: TableWork, cut: PassCut | None, schema: "StructType") -> TableReport:
        """A table's sync, step by step, once its Delta table is there and may be read (in the
        pass's `cut` if given; each step that leaves the cut hands on the cut it goes on with):
        the copy its columns or options ask for, the fast path of a table with nothing to apply,
        the state its batches start from (a first copy, a copy in chunks resumed), the batches,
        then the finish (history, mirrored state, report)."""
        choice = self.chooser.choose(w.path)
        self.routine(f"{w.t.name}: {choice.line()}")
        if self.settings.target.history:
            history_folds.catch_up_first(self.ctx, self.later, w.t, w.path)
        now = self.ctx.fingerprint(w.t, w.columns)
        quick, cut = self._copy_if_changed(w, cut, schema, now, choice.engine)
        mirror = mirrored(w.primary, self.settings.consumer, [w.t.table_id]).get(w.t.table_id)
        idle, cut = self._idle(w, quick, mirror, cut)
        if idle is not None:
            return self.finish(w, idle, choice.engine, now, cut)
        state, cut = self._start(w, mirror, cut, choice.engine)
        state, cut = self._batches(w, state, cut, choice.engine)
        return self.finish(w, state, choice.engine, now, cut)

    def _copy_if_changed(self, w: TableWork, cut: PassCut | None, schema: "StructType", now: str,
                         engine: Engine) -> tuple[ConsumerState | None, PassCut | None]:
        """Step 1: copy the table if its options changed since its Delta table was written
        (plan.copy_reason), or its columns where they cannot change in place (sync/evolution.py); the
        state its state file holds then."""
        key = self.ctx.key(w.t)
        quick = read_state_file(self.spark, w.path, key)
        copied = quick.columns if w.t.into is not None and quick is not None else ""  # (what its rows were copied with)
        why = copy_reason(w.primary, self.spark, self.settings, w.t, w.path, schema, copied, now)
        if why is None and w.t.into is None and (changed := in_place(self.ctx, w, schema)) is not None:
            why = Recopy(changed)
        if why is None:
            return quick, cut
        last = committed_batch(self.spark, w.path, key) or 0
        if why.by_range:
            _, cut = reconcile.recover(self.ctx, w, last, engine, cut, why.why)
        else:
            self.say(f"{w.t.name}: {why.why}: copying the table again")
            _, cut = copies.copy_table(self.ctx, w, last, engine, cut, why.why)
        return read_state_file(self.spark, w.path, key), cut

    def _idle(self, w: TableWork, quick: ConsumerState | None, mirror: "Mirrored | None",
              cut: PassCut | None) -> tuple[ConsumerState | None, PassCut | None]:
        """Step 2: the fast path for a table with nothing to apply, from its state file alone: the
        state moved past the empty batch, or None (the table takes the next steps). The state
        file may only lag Delta after a crash between the commit and the file write, and then
        the lagging state still sees the committed batch's events as pending, so it is never idle."""
        if quick is None or quick.copy is not None or quick.table_id != w.t.table_id:
            return None, cut
        quick = with_mirror(quick, mirror)
        if cut is not None and (refused := cut.admits(w.t, quick)) is not None:
            cut = leave(cut, w.t, refused, self.routine)
        batch = self.next_batch(w.reader, quick, cut=cut)
        if batch is not None and batch.events > 0:
            return None, cut
        check_state(w.primary, quick, w.identity, w.t, w.path)
        return moved(self.ctx, w.path, quick, batch), cut

    def _start(self, w: TableWork, mirror: "Mirrored | None", cut: PassCut | None,
               engine: Engine) -> tuple[ConsumerState, PassCut | None]:
        """Step 3: the state the batches start from: the committed one (checked against the
        database: plan.check_state), a first copy's, or that of a copy in chunks resumed."""
        state = load_state(self.spark, w.path, self.ctx.key(w.t))
        if state is not None:
            state = with_mirror(state, mirror)
        if state is None and w.t.into is None and reconcile.holds_rows(self.spark, w.path):  # (`pgcdc adopt`)
            state, cut = reconcile.recover(self.ctx, w, 0, engine, cut, "its Delta table holds rows but no state of "
                                           f"consumer {self.settings.consumer}")
        elif state is None:
            state, cut = copies.copy_table(self.ctx, w, 0, engine, cut, "its first copy")
        elif state.table_id != w.t.table_id:
            state, cut = reconcile.recover(self.ctx, w, state.batch, engine, cut, "it was detached and attached again "
                                           "(or with another key or predicate) since it was synced")
        elif state.copy is not None:  # a copy in chunks that a kill or a stop left under way
            cut = leave(cut, w.t, CHUNKS_UNDER_WAY, self.routine)
            check_state(w.primary, state, w.identity, w.t, w.path)
            state = copies.resume_copy(self.ctx, w, state, engine)
        elif cut is not None and (refused := cut.admits(w.t, state)) is not None:
            cut = leave(cut, w.t, refused, self.routine)
        check_state(w.primary, state, w.identity, w.t, w.path)
        return state, cut

    def _batches(self, w: TableWork, state: ConsumerState, cut: PassCut | None,
                 engine: Engine) -> tuple[ConsumerState, PassCut | None]:
        """Step 4: batch after batch, each planned in a snapshot (the pass's while it may), until
        the run's horizon, a stop request, or a copy under way (asked to stop between chunks);
        a long backlog's small files compacted on the way, the batches' after."""
        s, t = self.settings, w.t
        start: events.Snapshot | None = None
        compacted_at = 0  # (report.batches when the table's small files were last looked at)
        while state.copy is None:
            if cut is not None and not cut.open():
                cut = leave(cut, t, cut.late(), self.routine)
            with snapshots.reading(w.reader, None if cut is None else cut.held):
                snap = events.take_snapshot(w.reader)
                batch = self.next_batch(w.reader, state, snap)
                size = partitions.size(w.reader, t.name)
            start = start or snap
            if batch is None:
                break
            state, cut, w = batch_step(self.ctx, w, state, cut, engine, Planned(batch, snap, size))
            if batch.next_txid is None or batch.next_txid >= self.horizon(start):  # (None: caught up)
                break
            if self.stopping():
                cut = leave(cut, t, "the run was asked to stop before the table caught up", self.routine)
                break
            if 0 < s.ingest.compact_files <= w.report.batches - compacted_at:  # a long backlog: compact on the way
                self.ctx.compactor.between_batches(w.path, t.name, s.ingest.compact_files, t.fan_in_shard)
                compacted_at = w.report.batches
        if state.copy is not None:
            cut = leave(cut, t, CHUNKS_UNDER_WAY, self.routine)
        if w.report.batches and not self.stopping():  # (each batch added files)
            self.ctx.compactor.after_batches(w.path, t.name, s.ingest.compact_files, t.fan_in_shard)
        return state, cut

    def resync_table(self, src: RunSource, t: AttachedTable) -> TableReport:
        """Copy one table again from scratch (runs.resync_tables goes over the tables)."""
        s = self.settings
        path, recorded, report, columns = self.open_table(src.primary, src.reader, t)
        copies.create_target(self.ctx, src.primary, t, path, self.ctx.target_schema(src.jdbc, t, columns), columns)
        target.check_owner(self.spark, path, s.consumer, None if recorded else t.target_name, t.into is not None)
        last = committed_batch(self.spark, path, self.ctx.key(t)) or 0
        engine = self.chooser.choose(path).engine
        w = TableWork.of(src, t, columns, path, report)
        return self.finish(w, copies.copy_table(self.ctx, w, last, engine)[0], columns=self.ctx.fingerprint(t, columns))

    def finish(self, w: TableWork, state: ConsumerState, engine: Engine | None = None, columns: str = "",
               cut: PassCut | None = None) -> TableReport:
        """The last step: bring the table's history up to its Delta table (lake/history.py), mirror
        the state (also tells `pgcdc status` this run happened), let the engine tidy its own files,
        and report. `columns`: the fingerprint of the columns its Delta table was checked against
        in this run, kept in the state file for the next passes (sync/idle.py); `cut`: the pass's
        cut, which the table joins at the version holding its state (found in its history for a
        state written by an older pgcdc)."""
        t, path, report = w.t, w.path, w.report
        if cut is not None and state.version is None and (found := state_from_history(
                self.spark, path, state.key, state.batch)) is not None:
            state = replace(state, version=found.version)
            write_state_file(self.spark, path, state)
        if columns and state.columns != columns:
            state = replace(state, columns=columns)
            write_state_file(self.spark, path, state)
        if self.settings.target.history:
            history_folds.follow(self.ctx, self.later, t, path)
        mirror_state(w.primary, state, path)
        self.known[state.table_id] = (state, path)
        if engine is not None:
            engine.finish(path)
        report.watermark = state.watermark
        report.pending_events, report.oldest_pending = pending(w.reader, state)
        if cut is not None:
            cut.join(t, path, state)
        if report.wrote:
            self.say(report.line(), logging.INFO, report.record())
        else:
            self.routine(report.line())
        return report

    def horizon(self, start: events.Snapshot) -> int:
        """Where one run stops for a table while writers go on: once everything below the txmin
        it started with is applied (strict mode), or every transaction that had begun by then
        (out-of-order mode). Later transactions are the next run's."""
        return start.xmax if self.settings.ingest.mode == "out_of_order" else start.txmin

    def next_batch(self, reader: psycopg.Connection, state: ConsumerState, snap: events.Snapshot | None = None,
             cut: PassCut | None = None) -> events.Batch | None:
        """The next batch from `state` on, in the reader's current snapshot `snap` (or in the
        pass's snapshot, `cut`, or in a snapshot of its own)."""
        s = self.settings.ingest
        if snap is None:
            with snapshots.reading(reader, None if cut is None else cut.held):
                return self.next_batch(reader, state, events.take_snapshot(reader))
        return events.plan_batch(reader, snap, state, out_of_order=s.mode == "out_of_order",
                                 max_events=s.max_events_per_batch, max_keys=s.max_keys_per_batch)

    def committed(self, primary: psycopg.Connection, path: str, state: ConsumerState, written: Written,
                  copied: bool = False) -> ConsumerState:
        """After a Delta commit: RunContext.committed (the files checked, the state kept)."""
        return self.ctx.committed(primary, path, state, written, copied)
