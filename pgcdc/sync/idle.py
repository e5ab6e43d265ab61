"""A pass's tables with nothing to apply, passed without reading Delta.

Before a run goes over its tables one by one, three queries look at all of them at once: the
mirrored states (primary), every table's live columns and the queue from each table's
watermark on (reader, one snapshot). A table whose state this process knows (or its state file
holds, and whose history, if kept, holds its every commit), that PostgreSQL's mirror agrees
with, whose columns are the ones its Delta table was checked against, whose capture covers
its partition tree (partitions.gaps) and whose queue holds nothing to apply below the
horizon is idle: only its mirrored watermark moves (one statement for all of them). Every
other table takes the full path (`ingest.Job.sync_table`), which checks its Delta table.
What decides is `plan.idle_base` and `plan.idle_move`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc.lake import history
from pgcdc.lake.paths import local_folder, target_root
from pgcdc.lake.state import read_state_file
from pgcdc.source import events, partitions, snapshots
from pgcdc.source.columns import columns_of
from pgcdc.source.mirror import mirror_states, mirrored
from pgcdc.sync.context import RunContext
from pgcdc.sync.plan import idle_base, idle_move
from pgcdc.sync.report import TableReport

if TYPE_CHECKING:

    from pgcdc.source.capture import AttachedTable
    from pgcdc.source.mirror import Mirrored
    from pgcdc.source.sessions import RunSource
    from pgcdc.sync.pass_cut import PassCut
    from pgcdc.watermark import ConsumerState

    Known = dict[int, tuple[ConsumerState, str]]  # by table id: its state and Delta table, as last synced

_log = logging.getLogger(__name__)


def _log_present(path: str) -> bool:
    """A local Delta table's log folder is still there (one stat: a table whose log or folder
    someone deleted takes the full path, which says so); a remote one is not looked at."""
    folder = local_folder(path)
    return folder is None or (folder / "_delta_log").is_dir()


def pass_idle(ctx: RunContext, known: "Known", pass_cut: "PassCut | None", src: "RunSource",
              tables: list["AttachedTable"]) -> tuple[dict[str, TableReport], dict[int, int]]:
    """Pass every idle table of `tables` (see the module docstring): their reports, by name;
    and for the others it looked at, by table id, the oldest txid they have to apply (the
    run takes the table whose oldest pending change is oldest first). `known`: each table's
    state and Delta table as this process last synced them (kept up to date here);
    `pass_cut`: the pass's cut, which the idle tables join."""
    consumer, root, primary = ctx.settings.consumer, target_root(ctx.settings.target.root) + "/", src.primary
    mirrors = mirrored(primary, consumer, [t.table_id for t in tables])
    next_txid = int(primary.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0])
    candidates = [t for t in tables if t.table_id in mirrors and mirrors[t.table_id].target.startswith(root)
                  and _log_present(mirrors[t.table_id].target)]
    gapped = partitions.gaps(primary, {t.table_id: t.name for t in candidates})  # (copied on the full path)
    candidates = [t for t in candidates if t.table_id not in gapped]
    if not candidates:
        return {}, {}
    # in a cut, the queue is read in its snapshot and the idle tables join it
    cut = pass_cut if pass_cut is not None and pass_cut.enter("(idle)") else None
    try:
        return _pass(ctx, known, src, tables, _Seen(candidates, mirrors, next_txid), cut)
    finally:
        if cut is not None:
            cut.exit("(idle)")


@dataclass(frozen=True)
class _Seen:
    """What pass_idle found before it looked at each table: the tables that may be idle, their
    mirrored states, and the primary's next txid."""

    candidates: list["AttachedTable"]
    mirrors: dict[int, "Mirrored"]
    next_txid: int


_Bases = dict[int, tuple["AttachedTable", "ConsumerState", str]]


def _pass(ctx: RunContext, known_states: "Known", src: "RunSource", tables: list["AttachedTable"], seen: _Seen,
          cut: "PassCut | None") -> tuple[dict[str, TableReport], dict[int, int]]:
    """pass_idle's work once its candidates are known (in the pass's `cut` if given)."""
    candidates, reader = seen.candidates, src.reader
    with snapshots.reading(reader, None if cut is None else cut.held):
        bases = _bases(ctx, known_states, src, seen, cut)
        snap = events.take_snapshot(reader)
        queued = events.queued_txids(reader, {tid: base.watermark for tid, (_, base, _) in bases.items()})
    out_of_order = ctx.settings.ingest.mode == "out_of_order"
    passed: dict[str, TableReport] = {}
    oldest: dict[int, int] = {}
    moved: list[tuple["ConsumerState", str]] = []
    for tid, (t, base, path) in bases.items():
        state = idle_move(base, queued[tid], snap, out_of_order)
        if state is None:
            oldest[tid] = min((txid for txid, _, _ in queued[tid] if txid not in base.out_of_order), default=0)
            continue
        report = TableReport(t.name, path, watermark=state.watermark)
        report.pending_events, report.oldest_pending = events.unapplied(queued[tid], state)
        passed[t.name] = report
        moved.append((state, path))
    mirror_states(src.primary, moved)
    by_id = {t.table_id: t for t in candidates}
    for state, path in moved:
        known_states[state.table_id] = (state, path)
        if cut is not None:
            cut.join(by_id[state.table_id], path, state)
    if passed:
        ctx.routine(f"{len(passed)} of {len(tables)} table(s) idle: nothing to apply; watermarks moved, "
                    "their Delta tables not read")
    return passed, oldest


def _bases(ctx: RunContext, known_states: "Known", src: "RunSource", seen: _Seen, cut: "PassCut | None") -> _Bases:
    """The candidates whose state is known, agrees with PostgreSQL's mirror and was checked
    against the columns they have now (plan.idle_base), by table id: each with that state and
    its Delta table (read in the cut's snapshot, if given)."""
    bases: _Bases = {}
    current = columns_of(src.reader, [t.name for t in seen.candidates])
    for t in seen.candidates:
        m = seen.mirrors[t.table_id]
        known = known_states.get(t.table_id)
        if known is None or known[1] != m.target:
            state = read_state_file(ctx.spark, m.target, ctx.key(t))
            known = None if state is None else (state, m.target)
            if known is not None and ctx.settings.target.history and history.behind(ctx.spark, m.target):
                continue  # (a kill before its history followed: the full path folds it)
        if known is None:
            continue
        fp = ctx.fingerprint(t, current[t.name])
        base = idle_base(t, known[0], m, fp, src.identity, seen.next_txid)
        if base is not None and cut is not None and (base.version is None or cut.admits(t, base) is not None):
            continue  # (the full path finds its Delta version, or says why it cannot join the cut)
        if base is not None:
            bases[t.table_id] = (t, base, m.target)
    return bases
