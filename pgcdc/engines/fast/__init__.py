"""The fast engine: a batch as deletion vectors over the old rows of its keys plus new files
with its current rows, committed through Delta's internal transaction API. Every internal
Delta or JVM call pgcdc makes lives in this subpackage:

- commit.py: the transaction (file list, deletion vectors, metrics, commit with the state);
- deltalog.py: what the transaction reads from the Delta log (checksum answers);
- driver_marks.py, key_index.py: a batch's old rows found on the driver (no Spark job);
- driver_write.py: a small batch's rows written as one Parquet file by the driver, with
  the statistics Delta's writer would collect (file_stats.py);
- driver_copy.py: a small table's whole copy written the same way, in one overwrite commit;
- landed.py: the rows a batch writes into a table that holds pgcdc's columns (soft deletes,
  metadata columns).

It runs only where it was proven to write what Delta itself would (`untested`, `unfit`);
`pgcdc.engines.Chooser` gives every other table to the merge engine.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from pgcdc.engines.fast import commit, driver_copy, driver_write, key_index, landed
from pgcdc.lake.paths import local_folder
from pgcdc.source import enrich
from pgcdc.spark.jvm import in_background

if TYPE_CHECKING:
    import pyarrow as pa

    from pgcdc.engines.work import BatchWork, CopyWork
    from pgcdc.lake.tablelog import LogState
    from pgcdc.lake.target import Written

# The Delta builds the fast engine's internal calls were tested with (make test).
TESTED_DELTA = ("4.0.1",)
# Writer features whose tables it was tested on: the rest (row tracking, clustering, type
# widening, Iceberg compatibility, ...) need actions it does not write. The change data feed
# only where the history alone asks for it (`unfit`).
HANDLED_FEATURES = {"appendOnly", "invariants", "deletionVectors", "timestampNtz", "v2Checkpoint",
                    "vacuumProtocolCheck", "inCommitTimestamp", "checkpointProtection", "columnMapping",
                    "checkConstraints", "changeDataFeed"}

# A large batch's keys are read into the driver on this thread while Spark writes its rows
# (psycopg and pyarrow only: it never calls the JVM, see jvm.in_background).
_KEY_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgcdc-keys")


def untested(version: str) -> str | None:
    """Why the fast engine may not run on Delta `version`, or None."""
    if version in TESTED_DELTA:
        return None
    return f"Delta {version} is not a version the fast engine was tested with ({', '.join(TESTED_DELTA)})"


def unfit(path: str, log: "LogState", feed_for_history: bool = False) -> str | None:
    """Why the fast engine may not apply the table at `path` (its log state `log`), or None.

    It writes no change data files: Delta's change feed reader then finds a batch's changes
    from its commit's files and deletion vectors, an updated row as a delete and an insert
    (as it does for Delta's own DELETE with deletion vectors). That is all the history needs
    (lake/history.py), so `feed_for_history` (the feed is on for the history alone) lets it
    apply such a table; a feed asked for by `target.change_data_feed` (its readers expect
    `update_preimage`/`update_postimage`) leaves the table to the merge engine."""
    config = {k.lower(): str(v).lower() for k, v in log.configuration.items()}
    features = set(log.protocol.get("writerFeatures") or [])
    if local_folder(path) is None:
        return "the table is not on the local file system"
    if log.metadata.get("partitionColumns"):
        return "the table is partitioned (a fan-in's by shard, or by attach --delta-partition-by)"
    if config.get("delta.enablechangedatafeed") == "true" and not feed_for_history:
        return "the table has the change data feed on (delta.enableChangeDataFeed)"
    if config.get("delta.enablerowtracking") == "true" or "rowTracking" in features:
        return "the table has row tracking (delta.enableRowTracking)"
    if config.get("delta.enabledeletionvectors") != "true":
        return "the table has no deletion vectors (delta.enableDeletionVectors)"
    if config.get("delta.columnmapping.mode", "none") not in ("none", "name"):
        return f"the table's column mapping mode is {config['delta.columnmapping.mode']}"
    if extra := sorted(features - HANDLED_FEATURES):
        return f"the table has table features the fast engine does not handle ({', '.join(extra)})"
    return None


class FastEngine:
    """Applies a batch as deletion vectors plus new files (commit.merge). The keys of a batch
    of up to `driver_keys` keys are read into the driver, which finds their old rows; a small
    batch's rows too (if they fit in memory by the table's average row size), which the
    driver then writes itself; the rest is left to Spark. A table with pgcdc's columns has its
    rows written by Spark (landed.py), from the batch read once."""

    name = "fast"

    def apply(self, work: "BatchWork") -> "Written":
        s, t, columns, batch, reader = work.settings, work.table, work.columns, work.batch, work.reader
        on_driver = batch.keys <= s.driver_keys and enrich.keys_fit_driver(t, columns) \
            and local_folder(work.path) is not None
        shaped = bool(work.landing.fields())
        # the lowest and highest key (of a one-column integer key) let the files outside them
        # be skipped (with pgcdc's columns, also in reading gone keys' stored rows: landed.py);
        # read before the keys' thread may use the connection
        bounds = enrich.key_bounds(reader, t, batch) if shaped or not on_driver else None
        keys: Callable[[], pa.Table] | None = None
        rows: Future[list[tuple[object, ...]] | None] | None = None
        key_read: Future[pa.Table] | None = None
        if on_driver and not shaped and batch.keys <= s.small_batch_keys \
                and batch.keys * work.row_bytes <= enrich.DRIVER_ROWS_BYTES:
            fetched = enrich.fetch_keys(reader, t, columns, batch)
            keys = lambda: fetched  # noqa: E731
            # PostgreSQL looks the rows up while Spark resolves the batch's JDBC schema and
            # the driver finds the old rows; the rows are needed last, to be written
            rows = in_background(lambda: enrich.fetch_rows(reader, t, columns, fetched, work.snapshot))
        elif on_driver:  # the keys are read while Spark starts writing the rows
            key_read = _KEY_READER.submit(enrich.fetch_keys, reader, t, columns, batch)
            keys = key_read.result
        read = None
        try:
            read = work.read
            fetched_rows = rows
            local_rows = (lambda: driver_write.arrow_rows(fetched_rows.result(), read.schema)) \
                if fetched_rows is not None else None
            landed_rows = None
            if shaped:  # its live rows and gone keys come from one read of the batch (landed.py)
                from pyspark import StorageLevel

                read.frame.persist(StorageLevel.MEMORY_AND_DISK).count()
                shaped_read, landing = read, work.landing
                landed_rows = lambda version: landed.rows(work.spark, work.path, version,  # noqa: E731
                                                          shaped_read, landing, bounds)
            # (the driver takes the bounds from the keys it reads, of the first key column)
            return commit.merge(commit.Applying(work.spark, work.path, read, work.state, work.before_commit,
                                                landed_rows), None if keys is not None else bounds, keys, local_rows)
        finally:
            # the reader connection is free again before anything else uses it
            wait([f for f in (rows, key_read) if f is not None])
            if shaped and read is not None:
                read.frame.unpersist()

    def copy(self, work: "CopyWork") -> "Written | None":
        """A small table's copy written by the driver (driver_copy), where it is local."""
        if local_folder(work.path) is None:
            return None
        return driver_copy.copy(work)

    def finish(self, path: str) -> None:
        """Drop the key indexes of data files VACUUM deleted."""
        folder = local_folder(path)
        if folder is not None:
            key_index.prune(str(folder))


ENGINE = FastEngine()
