"""Consumer state: what a consumer has applied to one Delta table, and where it is kept.

State = (watermark, out_of_order): every event with txid < watermark is applied, and
so are the events of the txids in out_of_order (all >= watermark). It is committed in
the same Delta commit as the data it describes:

- Delta's idempotent-write `txn` action (appId "pgcdc:<consumer>", version = batch
  number) marks the commit; it survives checkpoints and log cleanup;
- the full state rides in that commit's commitInfo.userMetadata;
- after the commit it is copied to <table>/_pgcdc/<consumer>.json (VACUUM skips
  folders starting with "_"), so it outlives log retention, and mirrored into
  PostgreSQL (pgcdc.consumer_state) for status and queue retention.

On start the batch number in the txn action is the truth; the state is taken from the
file if it holds that batch, else from the commitInfo of that commit.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pgcdc.errors import TargetError
from pgcdc.jvm import cls

# pgcdc's own files beside a table's data (state copies, key indexes): VACUUM leaves "_" folders alone
FOLDER = "_pgcdc"

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

STATE_FORMAT = 1


@dataclass(frozen=True)
class TxidSet:
    """A set of txids stored as sorted, disjoint, inclusive ranges: compact while a long
    transaction holds the watermark back and many others commit above it."""

    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> "TxidSet":
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return cls(tuple(merged))

    def __contains__(self, txid: int) -> bool:
        return any(lo <= txid <= hi for lo, hi in self.ranges)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def union(self, other: "TxidSet") -> "TxidSet":
        return TxidSet.of(self.ranges + other.ranges)

    def at_or_above(self, txid: int) -> "TxidSet":
        """The part of the set at or above txid (what is still needed once the watermark reaches it)."""
        return TxidSet(tuple((max(lo, txid), hi) for lo, hi in self.ranges if hi >= txid))

    def encode(self) -> str:
        return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    @classmethod
    def decode(cls, text: str) -> "TxidSet":
        ranges = []
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            ranges.append((int(lo), int(hi or lo)))
        return cls.of(ranges)


@dataclass(frozen=True)
class ConsumerState:
    """The state of one consumer for one table, as committed with batch number `batch`."""

    consumer: str
    table: str
    table_id: int
    system_id: str
    watermark: int
    out_of_order: TxidSet = field(default_factory=TxidSet)
    batch: int = 0
    run_id: str = ""

    def next(self, watermark: int, applied_above: TxidSet) -> "ConsumerState":
        """The state after one more batch: the watermark only ever moves up."""
        wm = max(self.watermark, watermark)
        ooo = self.out_of_order.union(applied_above).at_or_above(wm)
        while ooo.ranges and ooo.ranges[0][0] == wm:  # the watermark swallows a range that starts at it
            wm = ooo.ranges[0][1] + 1
            ooo = ooo.at_or_above(wm)
        return replace(self, watermark=wm, out_of_order=ooo, batch=self.batch + 1, run_id=uuid.uuid4().hex)

    def to_json(self) -> str:
        return json.dumps({"pgcdc_state": STATE_FORMAT, "consumer": self.consumer, "table": self.table,
                           "table_id": self.table_id, "system_id": self.system_id, "watermark": self.watermark,
                           "out_of_order": self.out_of_order.encode(), "batch": self.batch, "run_id": self.run_id},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ConsumerState | None":
        """Parse a state; None if the text is not a pgcdc state (someone else's userMetadata)."""
        try:
            d = json.loads(text)
        except (TypeError, ValueError):
            return None
        if not isinstance(d, dict) or d.get("pgcdc_state") != STATE_FORMAT:
            return None
        return cls(consumer=d["consumer"], table=d["table"], table_id=int(d["table_id"]), system_id=d["system_id"],
                   watermark=int(d["watermark"]), out_of_order=TxidSet.decode(d["out_of_order"]),
                   batch=int(d["batch"]), run_id=d.get("run_id", ""))


def app_id(consumer: str) -> str:
    """The Delta txn appId of a consumer."""
    return f"pgcdc:{consumer}"


def committed_batch(spark: "SparkSession", path: str, consumer: str) -> int | None:
    """The batch number of the consumer's last commit to the Delta table (its txn version), or None."""
    from pgcdc.tablelog import txn_version

    version = txn_version(spark, path, app_id(consumer))
    return version if version >= 0 else None


def local_folder(path: str) -> Path | None:
    """The folder of a table on the local file system (plain path or file:// URI); None elsewhere."""
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(urlparse(path).path if path.startswith("file://") else path)


def _local_file(path: str, consumer: str) -> Path | None:
    """The state file of a table in a local folder; None elsewhere."""
    folder = local_folder(path)
    return folder / FOLDER / f"{consumer}.json" if folder is not None else None


def _state_file(spark: "SparkSession", path: str, consumer: str):
    file = cls(spark, "org.apache.hadoop.fs.Path")(f"{path.rstrip('/')}/{FOLDER}/{consumer}.json")
    return file, file.getFileSystem(spark._jsc.hadoopConfiguration())


def write_state_file(spark: "SparkSession", path: str, state: ConsumerState) -> None:
    """Copy the committed state next to the table: in a local folder written whole and renamed
    into place (no Py4J, no helper process); elsewhere through Hadoop's file system."""
    local = _local_file(path, state.consumer)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        staged = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
        staged.write_text(state.to_json(), encoding="utf-8")
        os.replace(staged, local)
        return
    file, fs = _state_file(spark, path, state.consumer)
    out = fs.create(file, True)
    try:
        out.write(bytearray(state.to_json().encode()))
    finally:
        out.close()


def read_state_file(spark: "SparkSession", path: str, consumer: str) -> ConsumerState | None:
    """The state copy next to the table; None if absent or unreadable (the commit history then serves)."""
    from py4j.protocol import Py4JJavaError

    local = _local_file(path, consumer)
    if local is not None:
        try:
            return ConsumerState.from_json(local.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None
    file, fs = _state_file(spark, path, consumer)
    try:
        if not fs.exists(file):
            return None
        stream = fs.open(file)
        try:
            text = cls(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8")
        finally:
            stream.close()
    except Py4JJavaError:  # e.g. a checksum error after a hand edit
        return None
    return ConsumerState.from_json(text)


def state_from_history(spark: "SparkSession", path: str, consumer: str, batch: int) -> ConsumerState | None:
    """Find the state of `batch` in the commitInfo of the table's recent commits."""
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, path).history().select("userMetadata").collect()
    for row in rows:  # newest first
        state = ConsumerState.from_json(row.userMetadata) if row.userMetadata else None
        if state and state.consumer == consumer and state.batch == batch:
            return state
    return None


def load_state(spark: "SparkSession", path: str, consumer: str) -> ConsumerState | None:
    """The consumer's committed state for the table at `path`, or None before its first sync.

    Repairs the state file when a crash hit between the Delta commit and the file write.
    """
    batch = committed_batch(spark, path, consumer)
    if batch is None:
        return None
    state = read_state_file(spark, path, consumer)
    if state is not None and state.batch == batch:
        return state
    state = state_from_history(spark, path, consumer, batch)
    if state is None:
        raise TargetError(f"Delta table {path} records batch {batch} of consumer {consumer} but its state is "
                          f"neither in _pgcdc/{consumer}.json nor in the commit history; "
                          "run `pgcdc resync` for this table to rebuild it")
    write_state_file(spark, path, state)
    return state


def mirror_state(conn: "psycopg.Connection", state: ConsumerState, target: str, copied: bool = False) -> None:
    """Copy the state into PostgreSQL (pgcdc.consumer_state) for status and queue retention.
    `copied`: the state of a whole-table copy, which ends a resync the retention limit asked for."""
    conn.execute(
        "insert into pgcdc.consumer_state (consumer, table_id, target, watermark, out_of_order, batch, updated_at) "
        "values (%s, %s, %s, %s::text::xid8, %s, %s, now()) on conflict (consumer, table_id) do update set "
        "target = excluded.target, watermark = excluded.watermark, "
        "out_of_order = excluded.out_of_order, batch = excluded.batch, updated_at = now()"
        + (", resync_reason = null, copy_from = null" if copied else ""),
        (state.consumer, state.table_id, target, str(state.watermark), state.out_of_order.encode(), state.batch))


def register_table(conn: "psycopg.Connection", consumer: str, table_id: int, target: str) -> int:
    """Before a copy takes its snapshot: make queue retention keep the table's events from the
    primary's current xmin on (a state already there keeps its lower watermark; one marked for a
    resync records it as copy_from); return that xmin. A snapshot taken afterwards has an xmin at
    least as high, so every event the copy leaves to the queue is kept."""
    xmin = int(conn.execute("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint").fetchone()[0])
    conn.execute(
        "insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
        "values (%s, %s, %s, %s::text::xid8, 0) on conflict (consumer, table_id) do update "
        "set watermark = least(pgcdc.consumer_state.watermark, excluded.watermark), "
        "copy_from = case when pgcdc.consumer_state.resync_reason is not null "
        "  then least(pgcdc.consumer_state.copy_from, excluded.watermark) end",  # (least() skips a null)
        (consumer, table_id, target, str(xmin)))
    return xmin


def table_path(conn: "psycopg.Connection", consumer: str, table_id: int, name: str, root: str) -> tuple[str, bool]:
    """Where the consumer syncs a table, and whether that place was recorded for it (not derived
    from its name now). A table is known by its table_id, not its name: once synced, it keeps
    its Delta table through renames (and renaming back finds the same one), as long as that lies
    under `root`. A table never synced lands at <root>/<schema>.<table>, unless the consumer syncs
    another table there (one renamed away from this name): then it is refused, naming that one."""
    from pgcdc.target import target_path, target_root

    row = conn.execute("select target from pgcdc.consumer_state where consumer = %s and table_id = %s",
                       (consumer, table_id)).fetchone()
    if row is not None and row[0].startswith(target_root(root) + "/"):
        return row[0], True
    path = target_path(root, name)
    other = conn.execute("select coalesce(a.table_name, a.relid::text) from pgcdc.consumer_state s "
                         "join pgcdc.attached a using (table_id) where s.consumer = %s and s.target = %s "
                         "and s.table_id <> %s", (consumer, path, table_id)).fetchone()
    if other is not None:
        raise TargetError(f"{path} is the Delta table of {other[0]}, which consumer {consumer} synced there under the "
                          f"name {name} before a rename; {name} is another table now: rename one of them, or use "
                          "another consumer or target.root for it")
    return path, False


def resync_reason(conn: "psycopg.Connection", consumer: str, table_id: int) -> str | None:
    """Why the table must be copied again for the consumer (it fell past the retention limit), or None."""
    row = conn.execute("select resync_reason from pgcdc.consumer_state where consumer = %s and table_id = %s",
                       (consumer, table_id)).fetchone()
    return row[0] if row else None


def mark_committing(conn: "psycopg.Connection", state: ConsumerState, target: str) -> None:
    """Record in PostgreSQL that the Delta commit of batch `state.batch` is about to be made,
    after every row it holds was read. A database that lacks this record later was restored to
    an earlier point (or failed over to a standby that was behind) and may lack changes Delta
    holds."""
    conn.execute(
        "insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch, committing) "
        "values (%s, %s, %s, %s::text::xid8, 0, %s) on conflict (consumer, table_id) do update "
        "set committing = greatest(pgcdc.consumer_state.committing, excluded.committing)",
        (state.consumer, state.table_id, target, str(state.watermark), state.batch))


def committing_batch(conn: "psycopg.Connection", consumer: str, table_id: int) -> tuple[bool, int | None]:
    """(whether PostgreSQL knows the consumer's table, the highest batch whose commit it recorded
    as started: None if not recorded yet)."""
    row = conn.execute("select committing from pgcdc.consumer_state where consumer = %s and table_id = %s",
                       (consumer, table_id)).fetchone()
    return (False, None) if row is None else (True, row[0])
