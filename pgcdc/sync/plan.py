"""Deciding what a table needs, apart from doing it (pgcdc/sync/ingest.py does it): where its
Delta table lies (`table_path`), whether its committed state can be trusted (`check_state`),
a copy before any batch (`copy_reason`) and who writes it (`copy_on_driver`), for each planned batch: apply it, copy the table
instead, or only move the watermark (`next_step`), and after its batches a compaction of its
small files (`compact_reason`); and whether a pass may leave a table alone without reading
its Delta table (`idle_base`, `idle_move`; pgcdc/sync/idle.py does it)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pgcdc.errors import TargetError
from pgcdc.lake import evolve, shards, tablelog, target
from pgcdc.lake.paths import target_path, target_root
from pgcdc.source import partitions
from pgcdc.source.mirror import committing_batch, recorded_target, resync_reason, target_holder

SMALL_FILE = 32 * 1024 * 1024  # bytes: a data file under this is small (Delta's OPTIMIZE aims at 1 GiB files)
SMALL_TABLE = 16 * 1024 * 1024  # bytes (pg_table_size): a table this small may be copied by the driver

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    import psycopg
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from pgcdc.lake.evolve import Evolution
    from pgcdc.lake.landing import Landing
    from pgcdc.lake.tablelog import LogState
    from pgcdc.settings import Settings
    from pgcdc.source.bounds import Rows
    from pgcdc.source.capture import AttachedTable
    from pgcdc.source.events import Batch, Snapshot
    from pgcdc.source.mirror import Mirrored
    from pgcdc.watermark import ConsumerState


@dataclass(frozen=True)
class Step:
    """What to do with one planned batch: `apply` it, `replace` the rows of the partitions it
    truncated or dropped and then apply it (`rows`), `copy` the table instead (`why`), or
    `pass` it (no event of the table: only the watermark moves)."""

    kind: Literal["apply", "replace", "copy", "pass"]
    why: str = ""
    rows: "Rows | None" = None


def next_step(batch: "Batch", rows: float, recopy_fraction: float, partitions: "Rows | str | None" = None) -> Step:
    """The step for `batch` of a table of ~`rows` rows (pg_class.reltuples; -1 before the
    first analyze); `partitions`: the rows of the partitions it truncated or dropped
    (source/bounds.py), or why no predicate names them.

    A TRUNCATE has no keys, and txid order is not commit order: a transaction with a lower
    txid may have written the table after the TRUNCATE committed. Only a copy in one
    snapshot is right whatever the order; for a partition, a copy of its bound's rows
    (sync/partition_step.py). A batch changing at least `recopy_fraction` of
    the table is also copied: that is faster and leaves it compact. The copy's snapshot
    covers every event below its txmin, this batch included."""
    if batch.events == 0:
        return Step("pass")
    if batch.truncate:
        return Step("copy", "a TRUNCATE")
    if isinstance(partitions, str):
        return Step("copy", f"a partition truncated or dropped ({partitions})")
    if 0 < recopy_fraction and rows > 0 and batch.keys >= recopy_fraction * rows:
        return Step("copy", f"{batch.keys} keys, >= {recopy_fraction:.0%} of ~{rows:.0f} rows")
    if partitions is not None:
        return Step("replace", rows=partitions)
    return Step("apply")


@dataclass(frozen=True)
class Recopy:
    """Why a table is copied before its batches, and whether reconciling it by range may do
    instead (sync/reconcile.py): where its Delta table's rows are right but for changes the
    queue no longer holds."""

    why: str
    by_range: bool = False


def copy_reason(primary: "psycopg.Connection", spark: "SparkSession", settings: "Settings", t: "AttachedTable",
                path: str, source: "StructType", copied: str = "", now: str = "") -> Recopy | None:
    """Why the table must be copied before batches apply to it again, or None: the consumer
    fell past the retention limit (the queue no longer keeps what it missed, see
    consumers.py: reconciled by range where it can be), capture no longer covers the table's
    partition tree (partitions.gaps: a copy each run until `pgcdc attach` makes capture follow
    it), attach asks for another partitioning
    of its Delta table (`layout_changed`), or the table's columns (`source`,
    as the sync reads them) changed (a fan-in source's: `copied` and `now`, see columns_changed).
    (Eight parameters: the last two a fan-in's alone, empty for any other table.)"""
    reason = resync_reason(primary, settings.consumer, t.table_id)
    if reason is not None:
        return Recopy(f"consumer {settings.consumer} fell past the retention limit ({reason})", by_range=True)
    gap = partitions.gaps(primary, {t.table_id: t.name}).get(t.table_id)
    if gap is not None:
        return Recopy(gap)
    layout = layout_changed(tablelog.read_state(spark, path, need_txns=False), t)
    if layout is not None and t.into is None:  # (a fan-in's table is always partitioned by shard)
        return Recopy(layout)
    if t.into is None:  # (another table's columns change in place where they can: column_step)
        return None
    changed = columns_changed(spark, settings, t, path, source, copied, now)
    return None if changed is None else Recopy(f"its columns changed ({changed})")


@dataclass(frozen=True)
class SourceColumns:
    """A table's columns as its sync reads them (`schema`, with pgcdc's own named in `own`),
    PostgreSQL's numbered by `attnums`, and what the catalog can tell on demand: what existing
    rows hold in added columns (`added(numbers)`, source/added.py) and whether a rewrite of
    the table would have been queued as a copy (`rewrites_seen()`: the DDL guard's rewrite
    trigger is on)."""

    schema: "StructType"
    attnums: dict[str, int]
    own: set[str]
    added: "Callable[[list[int]], dict[int, tuple[bool, Any]]]"
    rewrites_seen: "Callable[[], bool]"


def column_step(spark: "SparkSession", settings: "Settings", t: "AttachedTable", path: str,
                cols: SourceColumns) -> "Evolution | str | None":
    """What the table's columns ask of its Delta table (not a fan-in's) before any batch: nothing
    (None), a change in place (lake/evolve.py; also only recording the columns' numbers, where
    the Delta table never did), or a copy (why). With `on_schema_change = "fail"` a change
    stops the table's sync instead. A widening goes in place only where a rewrite would have
    been queued as a copy: PostgreSQL rewrites the table for most (int -> bigint), and a
    rewrite's USING may change values, which only the rewrite guard sees."""
    source, attnums, own = cols.schema, cols.attnums, cols.own
    log = tablelog.read_state(spark, path, need_txns=False)
    delta, ids = log.schema(), evolve.recorded(log)
    changed = target.schema_change(delta, source)
    if ids is not None and all(ids.get(n) == i for n, i in attnums.items()) and changed is None:
        return None
    step: evolve.Evolution | str
    if missing := [k for k in t.key_columns if k not in attnums]:  # (capture not told of a key renamed: no DDL guard)
        step = changed or f"key {', '.join(missing)} gone"
    else:
        top = max(ids.values(), default=0) if ids is not None else 0  # (PostgreSQL numbers a new column above)
        new = [attnums[f.name] for f in source.fields if f.name in attnums and
               (f.name not in {g.name for g in delta.fields} if ids is None else attnums[f.name] > top)]
        step = evolve.plan(delta, source, attnums, ids, cols.added(new) if new else {}, own)
        if isinstance(step, evolve.Evolution) and not step.said:
            return step  # (the same columns: their numbers recorded, a metadata commit)
        if isinstance(step, evolve.Evolution) and step.widened and not cols.rewrites_seen():
            step = (f"{step.line()}; a retype may have rewritten the table with new values, which only the DDL "
                    "guard's rewrite trigger (not installed or disabled) would have seen")
    if settings.ingest.on_schema_change == "fail":
        changed = step.line() if isinstance(step, evolve.Evolution) else step
        raise TargetError(f"the columns of {t.name} changed ({changed}) since {path} was written; run "
                          f"`pgcdc resync {t.name}` to copy the table again (or set ingest.on_schema_change "
                          f"= \"copy\" to have runs do it)")
    return step if isinstance(step, evolve.Evolution) else f"its columns changed ({step})"


def partition_columns(t: "AttachedTable") -> list[str]:
    """The columns the table's Delta table is partitioned by: a fan-in's shard (lake/shards.py),
    the column `attach --delta-partition-by` named, or none."""
    return [shards.SHARD] if t.into is not None else [t.delta_partition_by] if t.delta_partition_by else []


def layout_changed(log: "LogState", t: "AttachedTable") -> str | None:
    """How the Delta table's partition columns differ from those attach asks for now, or None
    (a copy writes the new layout)."""
    have, want = list(log.metadata.get("partitionColumns") or []), partition_columns(t)
    if have == want:
        return None
    return f"its Delta table is partitioned by {', '.join(have) or 'nothing'}, attach asks for {', '.join(want) or 'nothing'}"


def columns_changed(spark: "SparkSession", settings: "Settings", t: "AttachedTable", path: str,
                    source: "StructType", copied: str = "", now: str = "") -> str | None:
    """How the table's columns differ from its Delta table's, or None; with
    `on_schema_change = "fail"` a difference stops the table's sync instead. A fan-in
    source's: columns its Delta table lacks or holds with another type, or (`copied`, `now`:
    fingerprints of its columns when its rows were copied and now) any other change
    (shards.change). (Seven parameters: the last two a fan-in's alone, empty for any other table.)"""
    delta = tablelog.read_state(spark, path, need_txns=False).schema()
    changed = target.schema_change(delta, source) if t.into is None else shards.change(delta, source, copied, now)
    if changed is not None and settings.ingest.on_schema_change == "fail":
        raise TargetError(f"the columns of {t.name} changed ({changed}) since {path} was written; run "
                          f"`pgcdc resync {t.name}` to copy the table again (or set ingest.on_schema_change "
                          f"= \"copy\" to have runs do it)")
    return changed


def whole_copy_reason(log: "LogState", t: "AttachedTable", source: "StructType", size: "partitions.Size",
                      rows_per_chunk: int, uncut: str) -> str | None:
    """Why a copy reads the table in one snapshot (one commit) rather than in chunks
    (sync/chunked_copy.py), or None: its key cannot be cut (`uncut`, chunks.cut_key's reason), its
    Delta table changes columns or partitioning (a chunk replaces rows, not the schema; a
    fan-in's table may take new columns only in one write), or it holds no more than one chunk
    (~`rows_per_chunk` rows; an unanalyzed table's rows guessed at 64 bytes each), which is one
    snapshot anyway and may then be written by the driver (`copy_on_driver`)."""
    if uncut:
        return uncut
    if t.into is None and layout_changed(log, t) is not None:
        return "its Delta table takes another partitioning"
    have = log.schema()
    change = target.schema_change(have, source) if t.into is None else \
        ", ".join(f.name for f in source.fields if f.name not in {h.name for h in have.fields})
    if change:
        return f"its Delta table's columns change ({change})"
    if one_chunk(size, rows_per_chunk):
        return "one chunk holds it"
    return None


def one_chunk(size: "partitions.Size", rows_per_chunk: int) -> bool:
    """Whether a table of `size` holds no more than one chunk (~`rows_per_chunk` rows; an
    unanalyzed table's rows guessed at 64 bytes each)."""
    rows = size.rows if size.rows >= 0 else size.bytes / 64
    return rows <= rows_per_chunk


def copy_on_driver(table_bytes: int, engine: str, t: "AttachedTable", landing: "Landing") -> bool:
    """Whether a copy of a table of `table_bytes` (pg_table_size) is offered to the engine to
    write on the driver (Engine.copy; it may still leave it to Spark): a small table, whose
    rows fit in the driver's memory many times over, with the fast engine (the merge engine
    uses Delta's public API alone), whose Delta table is not partitioned and holds the source's
    columns alone (pgcdc's own, lake/landing.py, are Spark's to write)."""
    return engine == "fast" and table_bytes <= SMALL_TABLE and not partition_columns(t) and not landing.fields()


def compact_reason(log: "LogState", compact_files: int, shard: int | None = None) -> str | None:
    """Why the table's small files should be compacted now, or None: it has at least
    `compact_files` files under SMALL_FILE. Each batch adds a file (or two); every file
    costs each later batch a little, and past 50 files Delta stops listing them in its
    checksum, which the fast engine and the gone-files check then have to replay. Counted
    from the checksum (its file list, else its file count and total size); a version
    without one is not judged. A fan-in source's (`shard`): the files of its partition."""
    if compact_files <= 0:
        return None
    if log.all_files is not None:
        folder = "" if shard is None else shards.folder(shard)
        small = sum(1 for path, size in log.all_files.items() if size < SMALL_FILE and path.startswith(folder))
    elif log.num_files and log.table_bytes is not None and log.table_bytes / log.num_files < SMALL_FILE:
        small = log.num_files  # (files averaging under SMALL_FILE: most are small)
    else:
        return None
    return f"{small} small files" if small >= compact_files else None


def idle_base(t: "AttachedTable", known: "ConsumerState", m: "Mirrored", columns: str, identity: str,
              next_txid: int) -> "ConsumerState | None":
    """The state a pass may judge the table idle from without reading its Delta table, or None
    (it takes the full path). `known`: its committed state as this process or its state file
    knows it; `m`: the mirror; `columns`: the fingerprint of its name, key and columns now.

    Only when nothing can have happened that check_state or a columns check would catch: the
    mirror holds the same batch and no later commit was started (a higher `committing`: another
    run's commit; a lower one: a restore), the database is the same and not behind the state,
    the table was not attached again, no copy is asked for, and its columns are the ones its
    Delta table was last checked against. The mirror may be ahead of the state file (earlier
    idle passes move it alone): it then holds the same batch, a watermark moved over txids the
    table had no events in, and that is the base."""
    if known.copy is not None or known.columns != columns or known.table_id != t.table_id or \
            known.system_id != identity:
        return None
    if m.resync or not _agrees(known, m) or known.watermark > next_txid:
        return None
    return with_mirror(known, m)


def _agrees(state: "ConsumerState", m: "Mirrored") -> bool:
    """The mirror holds the state's batch and no later commit was started."""
    return m.batch == state.batch and m.committing in (None, state.batch)


def with_mirror(state: "ConsumerState", m: "Mirrored | None") -> "ConsumerState":
    """The committed `state`, moved up to the mirror's watermark if the mirror agrees with it
    (`_agrees`): idle passes move the mirror alone, over txids in which the table had no events,
    so the state file may lag it (and what a run prints never goes down)."""
    if m is None or not _agrees(state, m) or m.watermark <= state.watermark:
        return state
    return replace(state, watermark=m.watermark, out_of_order=m.out_of_order)


def idle_move(base: "ConsumerState", queued: list[tuple[int, int, "datetime"]], snap: "Snapshot",
              out_of_order: bool) -> "ConsumerState | None":
    """The state once an idle table is passed (its watermark moved up to the snapshot's txmin),
    or None if the queue holds something to apply: a txid from the base's watermark on (`queued`)
    outside its out-of-order set, below the txmin (strict mode) or anywhere (out-of-order mode,
    which takes committed transactions above the txmin too)."""
    top = max(base.watermark, snap.txmin)
    if any(txid not in base.out_of_order and (out_of_order or txid < top) for txid, _, _ in queued):
        return None
    return base.passed(top)


def check_state(primary: "psycopg.Connection", state: "ConsumerState", identity: str, t: "AttachedTable",
                path: str) -> None:
    """Refuse a state that does not belong to this database as it is now (see docs/operations.md)."""
    # states written before identities included the database hold the system identifier alone
    current = identity if "/" in state.system_id else identity.split("/")[0]
    if state.system_id != current:
        raise TargetError(f"{path} was synced from another database (identity {state.system_id}, now "
                          f"{current}): after a restore txids restart, so its watermark means nothing here: "
                          f"run `pgcdc reset-watermark` (or `pgcdc resync {t.name}`)")
    regressed = ("it was restored from an earlier backup (or failed over to a standby that was behind), and "
                 "changes Delta holds may be gone from it; run `pgcdc reset-watermark` to copy the tables again "
                 "from the database as it is now")
    # the next txid the primary hands out: a watermark above it means the database went back in time
    next_txid = int(primary.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0])
    if state.watermark > next_txid:
        raise TargetError(f"{path} holds changes up to txid {state.watermark}, but the database is only at txid "
                          f"{next_txid}: {regressed}")
    if state.table_id != t.table_id:
        raise TargetError(f"{t.name} was detached and attached again (or attached again with another key or "
                          f"predicate) since {path} was last synced; changes in between were not captured (or "
                          f"were queued by the old options): run `pgcdc resync {t.name}`")
    known, committing = committing_batch(primary, state.consumer, t.table_id)
    if not known:
        raise TargetError(f"{path} holds batch {state.batch} of consumer {state.consumer}, but the database has "
                          f"no record of the consumer's sync of {t.name}: the consumer was dropped (`pgcdc "
                          f"consumers drop`), or {regressed.replace('; run', '. Either way, run', 1)}")
    if committing is not None and committing < state.batch:
        raise TargetError(f"{path} holds batch {state.batch} of consumer {state.consumer}, which the database "
                          f"has no record of: {regressed}")


def table_path(conn: "psycopg.Connection", consumer: str, t: "AttachedTable", root: str) -> tuple[str, bool]:
    """Where the consumer syncs a table, and whether that place was recorded for it (not derived
    from its name now). A table is known by its table_id, not its name: once synced, it keeps
    its Delta table through renames (and renaming back finds the same one), as long as that lies
    under `root`. A table never synced lands at <root>/<schema>.<table> (a fan-in's source, at
    its fan-in's name), unless the consumer syncs another table there (one renamed away from
    this name): then it is refused, naming that one."""
    recorded = recorded_target(conn, consumer, t.table_id)
    if recorded is not None and recorded.startswith(target_root(root) + "/"):
        return recorded, True
    path = target_path(root, t.target_name)
    other = target_holder(conn, consumer, path, t.table_id, t.into)
    if other is not None:
        raise TargetError(f"{path} is the Delta table of {other}, which consumer {consumer} synced there under the "
                          f"name {t.target_name} before a rename; {t.target_name} is another table now: rename one of "
                          "them, or use another consumer or target.root for it")
    return path, False
