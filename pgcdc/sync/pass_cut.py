"""A pass as a consistent cut (docs/readers.md): one snapshot of the reader for every table of
the pass, and the record of which Delta version of each table equals PostgreSQL as of it.

Why a table read this way equals PostgreSQL as of the snapshot S: its state says which
transactions it holds (watermark + out-of-order set), and a key's Delta row is its PostgreSQL
row as some earlier read saw it, no transaction that changed the key after that read being in
the state (a batch's transactions were all committed when it planned, before it read). The pass
applies every transaction S shows that the state lacks, reading its keys' rows as of S. A key no
such transaction changed was changed by none between its last read and S. So every row is its
row as of S, provided the state held no transaction S does not show. Runs plan in a snapshot
taken before they commit, so that holds for every commit started before the pass took S;
`PassCut.admits` keeps out a table another worker committed to since (its snapshot may be newer).

A table joins the cut when the pass brought it to S: every batch planned and read in S (or
nothing to apply, idle tables included), or copied whole in S (a table of one chunk at most,
sync/copies.py; a first copy too: the pass registers such tables before it takes S, so the
queue keeps their events from before it). It is left out, named, when it was copied in a
snapshot of its own (a table larger than a chunk) or in chunks (the pass lets S go first: `close`), was
truncated or rewritten after S (PostgreSQL shows it empty to S: `drop_truncated`), failed, was
applied by another worker, or was reached after `ingest.cut_seconds`. A fan-in's Delta table joins when every
source attached to it does: a source the consumer's `tables` does not take in keeps it out.
Strict mode makes no cuts: it applies only what lies below S's txmin, and S shows more
(docs/readers.md).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from pgcdc.lake import cuts, tablelog
from pgcdc.lake.cuts import CutTable
from pgcdc.lake.state import app_id
from pgcdc.source import events, snapshots
from pgcdc.source.mirror import mirrored
from pgcdc.sync.report import REWRITTEN
from pgcdc.watermark import state_key

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import psycopg
    from pyspark.sql import SparkSession

    from pgcdc.source.capture import AttachedTable
    from pgcdc.source.snapshots import Held
    from pgcdc.watermark import ConsumerState


NOT_TAKEN = "the consumer does not take it in (its `tables` setting), and it writes to this fan-in too"


class PassCut:
    """The cut one pass is making: its held snapshot, and what became of each of its tables.
    Shared by the pass's lanes (a lock around what they record)."""

    def __init__(self, held: "Held", mirrors: dict[int, tuple[int, int | None]], seconds: float,
                 release: "Callable[[], None]" = lambda: None) -> None:
        """`mirrors`: each table's mirrored (batch, committing) read before the snapshot was taken;
        `release`: lets the held snapshot go (once past the deadline no table reads in it)."""
        self.held = held
        self.mirrors = mirrors
        # (on a standby without feedback, within half the time replay waits before cancelling it)
        seconds = seconds if held.limit is None else min(seconds, held.limit / 2)
        self.taken = datetime.now(timezone.utc)
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.release = release
        self.lock = threading.Lock()
        self.inside: set[str] = set()  # tables (or "(idle)") reading in the snapshot now
        self.released = False
        self.closed: str | None = None  # why no table may enter the snapshot any more (close)
        self.joined: dict[str, tuple["AttachedTable", str, int, int]] = {}  # by table: (it, path, version, batch)
        self.left: dict[str, str] = {}  # by table: why it is not in the cut
        self.copied: dict[int, int] = {}  # by table id: the batch of a copy this pass made in the snapshot

    def open(self) -> bool:
        """Whether tables (and batches) may still read in the snapshot."""
        return not self.released and self.closed is None and time.monotonic() < self.deadline

    def close(self, why: str) -> None:
        """No table enters the snapshot any more (`why`: a copy in chunks begins, which takes a
        snapshot per chunk): it is let go as soon as no table reads in it, so that no snapshot
        of the pass is held for as long as the copy runs."""
        with self.lock:
            self.closed = self.closed or why
            self._let_go()

    def enter(self, name: str) -> bool:
        """`name` starts reading in the snapshot; False if it may no longer (past the deadline)."""
        with self.lock:
            if not self.open():
                self._let_go()
                return False
            self.inside.add(name)
            return True

    def exit(self, name: str) -> None:
        """`name` no longer reads in the snapshot: past the deadline (or once closed) the last one
        out lets it go, so a pass with a long backlog holds it for at most one more batch per lane."""
        with self.lock:
            self.inside.discard(name)
            if time.monotonic() >= self.deadline or self.closed is not None:
                self._let_go()

    def _let_go(self) -> None:
        if not self.inside and not self.released:
            self.released = True
            self.release()

    def admits(self, t: "AttachedTable", state: "ConsumerState") -> str | None:
        """Why a table whose committed state is `state` cannot join, or None. Its state must be
        one committed before the snapshot was taken, or by a commit under way then (whose
        snapshot is older): another worker's later commit may hold transactions S does not show."""
        batch, committing = self.mirrors.get(t.table_id, (None, None))
        if state.batch in (batch, committing) or self.copied.get(t.table_id) == state.batch:
            return None
        if batch is None:
            return "it was first synced after this pass began"
        return "another worker of the consumer applied it after this pass took its snapshot"

    def copied_in(self, t: "AttachedTable", state: "ConsumerState") -> None:
        """The pass copied the table in its snapshot, committing `state` (which `admits`)."""
        with self.lock:
            self.copied[t.table_id] = state.batch

    def join(self, t: "AttachedTable", path: str, state: "ConsumerState") -> None:
        """The table is at the pass's snapshot with `state`, which its Delta table's version
        `state.version` holds."""
        with self.lock:
            if state.version is None:
                self.left[t.name] = "its Delta version is not known (a state written by an older pgcdc)"
            else:
                self.joined[t.name] = (t, path, state.version, state.batch)
        self.exit(t.name)

    def unjoin(self, t: "AttachedTable", why: str) -> None:
        """Take a table that joined out of the cut again (found wrong for it once the pass is done)."""
        with self.lock:
            self.joined.pop(t.name, None)
            self.left[t.name] = why

    def leave(self, t: "AttachedTable", why: str) -> None:
        with self.lock:
            self.left.setdefault(t.name, why)
        self.exit(t.name)

    def unreached(self) -> str:
        return self.late() if not self.open() else "the pass did not reach it (it stopped first)"

    def late(self) -> str:
        if self.closed is not None:
            return f"the pass had let its snapshot go when it reached it ({self.closed})"
        return f"the pass reached it after ingest.cut_seconds ({self.seconds:g} s{self.why_limit()})"

    def why_limit(self) -> str:
        return "" if self.held.limit is None else ", half the standby's max_standby_streaming_delay at most"

    def record(self, consumer: str, tables: list["AttachedTable"], outside: list["AttachedTable"]) -> cuts.Cut:
        """The cut as the lake keeps it: by Delta table; a fan-in's when every source joined,
        `outside` included: the fan-ins' sources the pass does not take in (the consumer's
        `tables` leaves them out), which write to them all the same."""
        snap = self.held.snap
        by_delta: dict[str, list["AttachedTable"]] = {}
        for t in tables:
            by_delta.setdefault(t.target_name, []).append(t)
        for t in outside:
            if t.target_name in by_delta:
                by_delta[t.target_name].append(t)
        away = {t.name for t in outside}
        joined: dict[str, CutTable] = {}
        left = dict(self.left)
        for delta, sources in sorted(by_delta.items()):
            out = [t.name for t in sources if t.name not in self.joined]
            if out:
                if delta not in left:
                    left[delta] = "; ".join(f"{n}: {NOT_TAKEN if n in away else self.left.get(n, self.unreached())}"
                                            for n in out)
                continue
            entries = [self.joined[t.name] for t in sources]
            joined[delta] = CutTable(entries[0][1], max(e[2] for e in entries), sorted(t.name for t in sources))
        name = f"{self.taken:%Y%m%dT%H%M%S%fZ}-{snap.xmax}"
        return cuts.Cut(consumer, name, self.taken.isoformat(), {"xmin": snap.txmin, "xmax": snap.xmax,
                                                                   "in_progress": len(snap.in_progress),
                                                                   "standby": snap.standby},
                        joined, left)


def leave(cut: PassCut | None, t: "AttachedTable", why: str, say: "Callable[[str], None]") -> PassCut | None:
    """Leave the table out of the pass's cut (if any), saying why; the caller goes on without it
    (reading as any run does): None, the cut it has from here on."""
    if cut is not None:
        cut.leave(t, why)
        say(f"{t.name}: not in this pass's cut: {why}")
    return None


@contextmanager
def taken(primary: "psycopg.Connection", connect_reader: "Callable[[], psycopg.Connection]", consumer: str,
          tables: list["AttachedTable"], seconds: float) -> "Iterator[PassCut]":
    """Hold one snapshot of the reader for a pass (source/snapshots.py), the tables' mirrored
    batches read first (PassCut.admits)."""
    found = mirrored(primary, consumer, [t.table_id for t in tables])
    mirrors = {tid: (m.batch, m.committing) for tid, m in found.items()}
    with snapshots.hold(connect_reader) as (held, release):
        yield PassCut(held, mirrors, seconds, release)


TRUNCATED = ("it was truncated or rewritten after the pass's snapshot, which PostgreSQL then shows empty to "
             "that snapshot (neither is MVCC-safe): the next pass copies it")


def overtaken(changed: str) -> tuple[str, str]:
    """What a run says of a table whose read failed for DDL since the run checked it (`changed`:
    PostgreSQL's words), and why the table leaves the pass's cut: a rewrite, or its columns."""
    if REWRITTEN in changed:
        return (f"rewritten while this run read it ({changed})", "it was truncated or rewritten after the pass's "
                "snapshot, which PostgreSQL then shows empty to that snapshot: its batch read as the rows are now")
    return f"its columns changed while this run read it ({changed})", f"its columns changed during the pass ({changed})"


def drop_truncated(primary: "psycopg.Connection", cut: PassCut) -> None:
    """Take the tables truncated or rewritten after the pass's snapshot out of the cut
    (events.truncated_after): what the pass read of them in its snapshot may be wrong."""
    joined = {t.table_id: t for t, _, _, _ in cut.joined.values()}
    for table_id in events.truncated_after(primary, cut.held.snap, sorted(joined)):
        cut.unjoin(joined[table_id], TRUNCATED)


def write(spark: "SparkSession", root: str, consumer: str, cut: PassCut, tables: list["AttachedTable"],
          attached: list["AttachedTable"]) -> cuts.Cut:
    """Record the pass's cut in the lake (lake/cuts.py), a fan-in's Delta table only where every
    source of it that is `attached` joined (PassCut.record) and none of them was committed again
    between their versions in the cut (fan_in_moved)."""
    for into in sorted({t.into for t in tables if t.into is not None}):
        sources = [t for t in tables if t.into == into]
        if all(t.name in cut.joined for t in sources) and (why := fan_in_moved(spark, consumer, cut, into)):
            for t in sources:
                cut.unjoin(t, why)
    taken = {t.name for t in tables}
    made = cut.record(consumer, tables, [t for t in attached if t.into is not None and t.name not in taken])
    cuts.write(spark, root, made)
    return made


def fan_in_moved(spark: "SparkSession", consumer: str, cut: PassCut, into: str) -> str | None:
    """Why a fan-in's Delta table cannot be read at the newest of its sources' versions in the cut,
    or None: a source's own commit in the cut is older than another's, and between the two a later
    batch of a source may have landed (another worker of the consumer applied it after the pass's
    snapshot; the pass lets a table's lease go when it is done with it). Read from the Delta log:
    the commits between carry each source's batch number (its txn)."""
    entries = [e for e in cut.joined.values() if e[0].into == into]
    low, high = min(e[2] for e in entries), max(e[2] for e in entries)
    batches = {app_id(state_key(consumer, e[0].fan_in_shard)): e[3] for e in entries}
    for version in range(low + 1, high + 1):
        actions = tablelog.commit_actions(spark, entries[0][1], version)
        if actions is None:
            return f"its Delta table's commit {version} is gone from its log, so the cut cannot be checked"
        for action in actions:
            txn = action.get("txn") or {}
            if txn.get("appId") in batches and int(txn.get("version", -1)) > batches[txn["appId"]]:
                return (f"a source of {into} was applied again after this pass's snapshot (commit {version}, "
                        "another worker of the consumer)")
    return None
