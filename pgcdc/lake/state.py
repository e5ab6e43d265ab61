"""The consumer state (pgcdc.watermark) on the Delta side: committed in the same Delta commit
as the data it describes, and read back from it.

- Delta's idempotent-write `txn` action (appId "pgcdc:<key>", version = batch
  number) marks the commit; it survives checkpoints and log cleanup;
- the full state rides in that commit's commitInfo.userMetadata;
- after the commit it is copied to <table>/_pgcdc/<key>.json (VACUUM skips
  folders starting with "_"), so it outlives log retention, and mirrored into
  PostgreSQL (pgcdc.consumer_state) for status and queue retention.

The key (ConsumerState.key) is the consumer's name; in a fan-in's Delta table each source has
a state of its own, "<consumer>@<shard>", beside the others (several txn appIds in one table).

On start the batch number in the txn action is the truth; the state is taken from the
file if it holds that batch, else from the commitInfo of that commit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from pgcdc.errors import TargetError
from pgcdc.lake import side_files
from pgcdc.lake.tablelog import txn_version
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def app_id(key: str) -> str:
    """The Delta txn appId of a state key (a consumer, or a consumer's fan-in shard)."""
    return f"pgcdc:{key}"


def committed_batch(spark: "SparkSession", path: str, key: str) -> int | None:
    """The batch number of the last commit of state `key` to the Delta table (its txn version), or None."""
    version = txn_version(spark, path, app_id(key))
    return version if version >= 0 else None


def write_state_file(spark: "SparkSession", path: str, state: ConsumerState) -> None:
    """Copy the committed state next to the table (lake/side_files.py)."""
    side_files.write_text(spark, path, f"{state.key}.json", state.to_json())


def remove_state_file(spark: "SparkSession", path: str, key: str) -> None:
    """Delete the state copy of `key` (a fan-in source that left: pgcdc/sync/departed.py)."""
    side_files.remove(spark, path, f"{key}.json")


def read_state_file(spark: "SparkSession", path: str, key: str) -> ConsumerState | None:
    """The state copy next to the table; None if absent or unreadable (the commit history then serves)."""
    text = side_files.read_text(spark, path, f"{key}.json")
    return None if text is None else ConsumerState.from_json(text)


def state_from_history(spark: "SparkSession", path: str, key: str, batch: int) -> ConsumerState | None:
    """Find the state of `batch` in the commitInfo of the table's recent commits."""
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
    for row in rows:  # newest first
        state = ConsumerState.from_json(row.userMetadata) if row.userMetadata else None
        if state and state.key == key and state.batch == batch:
            return replace(state, version=int(row.version))
    return None


def load_state(spark: "SparkSession", path: str, key: str, repair: bool = True) -> ConsumerState | None:
    """The committed state `key` (a consumer's, or its fan-in shard's) for the table at `path`,
    or None before its first sync.

    Repairs the state file when a crash hit between the Delta commit and the file write
    (unless not `repair`: `pgcdc verify` only reads).
    """
    batch = committed_batch(spark, path, key)
    if batch is None:
        return None
    state = read_state_file(spark, path, key)
    if state is not None and state.batch == batch:
        return state
    state = state_from_history(spark, path, key, batch)
    if state is None:
        raise TargetError(f"Delta table {path} records batch {batch} of consumer {key} but its state is "
                          f"neither in _pgcdc/{key}.json nor in the commit history; "
                          "run `pgcdc resync` for this table to rebuild it")
    if repair:
        write_state_file(spark, path, state)
    return state
