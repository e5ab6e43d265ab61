"""`pgcdc repair`: rewrite only the rows that differ. Verify (diff/rows.py) finds them, while
the application writes, apart from those still on their way; their keys go into the queue as
changes (U events, as capture's), and the table's sync applies them at once: each key's row read
again from PostgreSQL, written where it differs, deleted where PostgreSQL no longer has it. Work
grows with the rows that differ, not with the table.

Why it is exact under live writes: a queued key is a change like any other; the batch that
applies it reads the row as it is when it reads (a later change is a later event), so a key
queued twice, or one the application changes meanwhile, still lands as PostgreSQL holds it. The
table's lease is held from the comparison to the end, so no other worker applies it meanwhile.
A kill after the keys are queued leaves them in the queue: the next run applies them.

What it compares: within RECENT of a `pgcdc verify` that found rows different (its key ranges
kept beside the Delta table: lake/verified.py), only those ranges, read again in a snapshot
of their own (a row there that the application changed meanwhile is read as it is now);
otherwise (or with `whole`, `--all`) the whole table. After applying, it compares again only
the ranges that differed. So a repair soon after verify costs the rows of the ranges that
differ, not the table's; a row changed behind pgcdc's back after that verify, elsewhere, is
found by the next verify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgcdc.diff.queue import queue_differing, replayed
from pgcdc.diff.rows import Comparison, Ranges, compare
from pgcdc.errors import TargetError
from pgcdc.lake import verified
from pgcdc.lake.state import load_state
from pgcdc.source.capture import AttachedTable
from pgcdc.source.sessions import RunSource
from pgcdc.settings import Settings
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import leased_tables, preflight
from pgcdc.sync.plan import table_path
from pgcdc.watermark import state_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RECENT = 3600.0  # seconds: a verify this recent says which key ranges to compare


@dataclass(frozen=True)
class Repair:
    """What repair found and did for one table: the comparison before, the keys it queued and
    applied (none with `dry_run`), and the comparison after (None if nothing was queued)."""

    table: str
    before: Comparison
    queued: int
    after: Comparison | None = None

    @property
    def done(self) -> bool:
        """The table is equal now (or was), or nothing could be done (a problem verify names)."""
        return (self.after or self.before).equal

    def line(self) -> str:
        if self.before.equal:
            return f"{self.table}: nothing to repair ({self.before.line().split(': ', 1)[1]})"
        if self.before.problem is not None or self.before.columns is not None:
            return f"{self.before.line()} (repair rewrites rows, not this)"
        if self.after is None:
            return (f"{self.table}: {self.queued} rows differ ({self.before.line().split(': ', 1)[1]}); "
                    "`pgcdc repair` without --dry-run rewrites them")
        return f"{self.table}: {self.queued} differing rows read again and rewritten; now {self.after.line()}"


def repair(settings: Settings, names: list[str], dry_run: bool = False, say: Callable[[str], None] | None = None,
           spark: "SparkSession | None" = None, whole: bool = False) -> list[Repair]:
    """Repair each table (compared, then the differing rows' keys queued and applied), each under
    its lease (runs.leased_tables); in a local Spark session unless given one, once the settings
    are checked. `whole`: compare the whole table even after a recent verify. (Six parameters:
    what to repair and how, and where to say it.)"""
    if spark is None:
        preflight(settings, names)
        spark = get_session(settings.spark, target_root=settings.target.root)
    job = Job(settings, spark, say)

    def one(src: RunSource, t: AttachedTable, sync: Callable[[], object]) -> Repair:
        done = _repair(spark, settings, src, t, sync, (dry_run, whole))
        (say or print)(done.line())
        return done
    return leased_tables(job, names, one)


def _repair(spark: "SparkSession", settings: Settings, src: RunSource, t: AttachedTable, sync: Callable[[], object],
            asked: tuple[bool, bool]) -> Repair:
    """One table's repair, its lease held: `sync` runs its sync; `asked`: (dry run, whole).
    (Six parameters: the run's session and settings, the table's source, and what to do.)"""
    dry_run, whole = asked
    path = table_path(src.primary, settings.consumer, t, settings.target.root)[0]
    key = state_key(settings.consumer, t.fan_in_shard)
    state = load_state(spark, path, key, repair=False)
    if state is None:
        raise TargetError(f"consumer {settings.consumer} has not synced {t.name} yet (no state in {path}): run `pgcdc "
                          "ingest`, whose first run copies it")
    if state.copy is not None:
        raise TargetError(f"a copy of {t.name} in chunks is under way: run `pgcdc ingest`, which finishes it, then "
                          "repair")
    found = None if whole else verified.last(spark, path, key)
    ranges = found.ranges if found is not None and found.age() < RECENT else None
    only = Ranges.decode(ranges) if ranges and ranges["chosen"] else None
    before = compare(spark, src.reader, t, path, state, only)
    if before.equal or before.problem is not None or before.columns is not None or dry_run:
        if only is not None and before.equal and not dry_run:
            verified.forget(spark, path, key)
        return Repair(t.name, before, len(before.differing))
    queued = queue_differing(src.primary, t, before.differing)
    replayed(src.primary, src.reader)
    sync()
    after = compare(spark, src.reader, t, path, load_state(spark, path, key, repair=False), before.ranges)
    verified.forget(spark, path, key)
    return Repair(t.name, before, queued, after)
