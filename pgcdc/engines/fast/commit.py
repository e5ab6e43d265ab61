"""The fast engine's commit: a batch as deletion vectors over the old rows of its keys plus
new files with its current rows, committed through Delta's transaction (internal API).

One commit per table per batch with a MERGE's effect (update matched keys, insert new
keys, delete keys whose row is gone), with one join of the keys against the target's
key column instead of Delta MERGE's passes, and no unchanged row rewritten. The state
rides in the same commit (Delta's txn action + commitInfo).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from py4j.protocol import Py4JJavaError

from pgcdc import faults
from pgcdc.engines.fast import driver_marks, driver_write
from pgcdc.engines.fast.deltalog import Opened, files_overlapping, read_all_files, read_committed_version, stored_rows
from pgcdc.errors import ConflictError, TargetError
from pgcdc.lake.state import app_id
from pgcdc.lake.target import Written, state_commit
from pgcdc.source.enrich import KEY_PREFIX, array_bounds
from pgcdc.spark.jvm import alongside, cls, kept, pylist, scala_map, seq
from pgcdc.spark.jvm import none as jvm_none
from pgcdc.spark.jvm import some as jvm_some
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from pgcdc.source.batch_read import BatchRead

_FILE, _ROW = "__pgcdc_file", "__pgcdc_row"
T = TypeVar("T")
BROADCAST_KEYS = 2_000_000


@dataclass(frozen=True)
class Applying:
    """One batch as the fast engine commits it: into the Delta table at `path`, its `read`
    (source/batch_read.py), with `state`; `before_commit` runs once every row is read and
    written, right before the commit. `landed_rows` (given the version the transaction read)
    gives the rows to write instead of `read.rows` (a table with pgcdc's columns: landed.py)."""

    spark: "SparkSession"
    path: str
    read: "BatchRead"
    state: ConsumerState
    before_commit: Callable[[], None]
    landed_rows: "Callable[[int], DataFrame] | None" = None


def merge(a: Applying, bounds: tuple[int, int] | None = None, keys: "Callable[[], pa.Table] | None" = None,
          local_rows: "Callable[[], pa.Table | None] | None" = None) -> Written:
    """Apply one batch in one Delta commit that also carries the state.

    Every Delta row whose key is in the batch (`read.keys`) is marked deleted with a
    deletion vector, and the batch's live rows (`read.rows`) are written as new files:
    update matched, insert new, delete gone, as a MERGE would, but with one join of the
    keys against the target's key column instead of Delta MERGE's three passes, and no
    unchanged row rewritten. (A batch holding a TRUNCATE is never merged: it is copied.) `bounds`
    (lowest, highest key of a one-column integer key) lets Delta skip the files whose key
    range lies outside the batch. `keys` (gives the same keys, read into the driver) lets
    the driver find the rows (driver_marks, the bounds of the first key column) while
    Spark writes `read.rows`; else Spark joins `read.keys` to the stored key columns.
    `local_rows` (gives the same as `read.rows`, read on the driver, with `keys`)
    lets the driver write them too (driver_write); where it gives None, Spark writes.
    """
    from pyspark import StorageLevel

    spark, path, read, state = a.spark, a.path, a.read, a.state
    started = time.monotonic()
    o = Opened.of(spark, path)
    if read_committed_version(o, app_id(state.key)) >= state.batch:
        raise TargetError(f"batch {state.batch} of consumer {state.consumer} is already committed to {path}: "
                          "is a second ingest running elsewhere?")
    if o.config("delta.enableDeletionVectors").lower() != "true":
        raise TargetError(f"deletion vectors are turned off on {path}; pgcdc applies batches with them: turn them on "
                          f"again (ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = "
                          "'true')) and run the ingest again")
    # Reading the whole file list records it in the transaction: a concurrent rewrite of
    # those files (OPTIMIZE elsewhere) makes this commit fail instead of resurrecting rows.
    files = pylist(spark, read_all_files(o))
    if keys is not None:
        (added, write_ms), (found, scan_ms) = alongside(  # rows written while old ones are found
            lambda: _timed(lambda: _write_rows(a, o, local_rows)),
            lambda: _timed(lambda: _found_on_driver(spark, o, files, read, keys())))
        return _apply(a, o, found, _Timing(started, scan_ms, write_ms), added)
    if bounds is not None:  # files whose key range misses the batch hold none of its keys
        files = files_overlapping(files, o.physical_names(read.key_columns[:1])[0], *bounds)
    key_frame = read.keys.persist(StorageLevel.MEMORY_AND_DISK)  # read once from PostgreSQL: counted, then joined
    try:
        num_keys = key_frame.count()
        vectors, scan_ms = _timed(lambda: _matched_rows(spark, o, files, key_frame, num_keys, bounds))
        return _apply(a, o, _Found(files, vectors, num_keys, bounds), _Timing(started, scan_ms), None)
    finally:
        key_frame.unpersist()


@dataclass
class _Found:
    """A batch's old rows: the files that may hold its keys, the deletion vectors over its keys'
    rows in them, its number of keys and their lowest and highest (of a one-column integer key)."""

    files: list[Any]
    vectors: Any
    keys: int
    bounds: tuple[int, int] | None


@dataclass
class _Timing:
    """When the batch started, and how long finding its old rows and writing its rows took (ms)."""

    started: float
    scan_ms: int
    write_ms: int = 0


def _timed(work: Callable[[], T]) -> tuple[T, int]:
    began = time.monotonic()
    result = work()
    return result, int((time.monotonic() - began) * 1000)


def _found_on_driver(spark: "SparkSession", o: Opened, files: list[Any], read: "BatchRead", keys: "pa.Table") -> _Found:
    """The files that may hold `keys` (by their key range), the deletion vectors over their
    rows of `keys` (found by the driver; by a Spark join if a file is not on the local file
    system), and the number of keys."""
    bounds = array_bounds(keys)
    stored = o.physical_names(read.key_columns)  # (the names the files and their statistics use)
    if bounds is not None:
        files = files_overlapping(files, stored[0], *bounds)
    paths = driver_marks.local_paths(o, files)
    if paths is None:
        vectors = _matched_rows(spark, o, files, read.keys, keys.num_rows, bounds)
    else:
        vectors = driver_marks.deletion_vectors(spark, o, files, paths, stored, keys.rename_columns(stored))
    return _Found(files, vectors, keys.num_rows, bounds)


def _write_rows(a: Applying, o: Opened, local_rows: "Callable[[], pa.Table | None] | None") -> list[Any]:
    """Write the batch's rows: by the driver where it has them (`local_rows`), else by a Spark
    job (`landed_rows`, or the live rows); their AddFiles."""
    table = local_rows() if local_rows is not None else None
    added = driver_write.write(a.spark, o, table, a.read.key_columns) if table is not None else None
    if added is not None:
        return added
    rows = a.landed_rows(int(o.txn.readVersion())) if a.landed_rows is not None else a.read.rows
    return pylist(a.spark, o.txn.writeFiles(rows._jdf))


def _apply(a: Applying, o: Opened, found: _Found, timing: _Timing, added: list[Any] | None) -> Written:
    """Commit the rows' new files (`added`, written by the driver; if None, Spark writes them
    now) with the deletion vectors (`found`) and the state, with a MERGE's operation
    parameters and metrics."""
    spark, txn = a.spark, o.txn
    removals, dv_metrics = _mark_deleted(spark, txn, found.files, found.vectors)
    if added is None:
        written, timing.write_ms = _timed(lambda: _write_rows(a, o, None))
    else:
        written = added
    added_json = [json.loads(x.json())["add"] for x in written]
    upserted = sum(json.loads(x["stats"]).get("numRecords", 0) for x in added_json if x.get("stats"))
    # Keys split into updated (old row and current row), deleted (old row, no current row) and
    # inserted (current row only); the counts give them exactly unless a key had neither (inserted
    # and deleted within the batch), which counts as deleted here and as nothing in Delta's MERGE.
    matched = dv_metrics.get("numModifiedRows", 0)
    deleted = min(matched, found.keys - upserted)
    updated = matched - deleted
    record_metrics(spark, txn, {
        "operationNumSourceRows": found.keys, "numOutputRows": upserted, "numTargetRowsCopied": 0,
        "numTargetRowsInserted": upserted - updated, "numTargetRowsUpdated": updated,
        "numTargetRowsDeleted": deleted, "numTargetRowsMatchedUpdated": updated,
        "numTargetRowsMatchedDeleted": deleted, "numTargetRowsNotMatchedBySourceUpdated": 0,
        "numTargetRowsNotMatchedBySourceDeleted": 0,
        "numTargetFilesAdded": len(written), "numTargetFilesRemoved": dv_metrics.get("numRemovedFiles", 0),
        "numTargetChangeFilesAdded": 0,
        "numTargetBytesAdded": sum(int(x.get("size", 0)) for x in added_json),
        "numTargetBytesRemoved": _bytes_removed(removals),
        "numTargetDeletionVectorsAdded": dv_metrics.get("numDeletionVectorsAdded", 0),
        "numTargetDeletionVectorsRemoved": dv_metrics.get("numDeletionVectorsRemoved", 0),
        "numTargetDeletionVectorsUpdated": dv_metrics.get("numDeletionVectorsUpdated", 0),
        "scanTimeMs": timing.scan_ms, "rewriteTimeMs": timing.write_ms, "materializeSourceTimeMs": 0,
        "executionTimeMs": int((time.monotonic() - timing.started) * 1000)})
    a.before_commit()
    version = commit_actions(spark, a.path, txn, removals + written, a.state,
                             _operation(spark, a.read.key_columns, found.bounds))
    return Written(version, upserted, deleted)


def _bytes_removed(actions: list[Any]) -> int:
    """Bytes of the data files a commit removes outright (not re-added with a deletion vector)."""
    parsed = [json.loads(a.json()) for a in actions]
    readded = {p["add"]["path"] for p in parsed if "add" in p}
    return sum(int(p["remove"].get("size") or 0) for p in parsed if "remove" in p and p["remove"]["path"] not in readded)


def _operation(spark: "SparkSession", key_columns: list[str], bounds: tuple[int, int] | None) -> Any:
    """The MERGE operation the merge engine's DeltaTable.merge records (pgcdc/engines/merge.py),
    with the same predicates as text."""
    clauses = [f"({k} = {KEY_PREFIX}{k})" for k in key_columns]
    if bounds is not None:
        clauses.append(f"(({key_columns[0]} >= {int(bounds[0])}) AND ({key_columns[0]} <= {int(bounds[1])}))")
    condition = clauses[0]
    for clause in clauses[1:]:
        condition = f"({condition} AND {clause})"
    clauses_by_kind = _merge_clauses(spark, key_columns[0])
    return cls(spark, "org.apache.spark.sql.delta.DeltaOperations$Merge")(
        jvm_some(spark, getattr(cls(spark, "org.apache.spark.sql.catalyst.expressions.Literal$"), "MODULE$").apply(condition)),
        *[jvm_none(spark)] * 3, *clauses_by_kind)


def _merge_clauses(spark: "SparkSession", key: str) -> tuple[Any, Any, Any]:
    """The MERGE operation's matched, not-matched and not-matched-by-source clauses, the same
    for every batch of a table: made once per session and key column (~20 Py4J calls)."""
    def make() -> tuple[Any, Any, Any]:
        live = f"isnotnull({key})"
        predicate = cls(spark, "org.apache.spark.sql.delta.DeltaOperations$MergePredicate")

        def clause_list(*pairs: tuple[str, str]) -> Any:
            return seq(spark, [predicate(jvm_some(spark, text), action) for text, action in pairs])
        return clause_list((f"isnull({key})", "delete"), (live, "update")), clause_list((live, "insert")), seq(spark, [])
    return kept(spark, ("merge clauses", key), make)


def _matched_rows(spark: "SparkSession", o: Opened, files: list[Any], keys: "DataFrame", num_keys: int,
                  bounds: tuple[int, int] | None) -> Any:
    """Deletion vectors (Delta's DeletionVectorResults, written) over every row of `files`
    whose key is in `keys`, found by a Spark join."""
    from pyspark.sql import functions as F

    if not files:
        return seq(spark, [])
    key_columns = keys.columns
    target = stored_rows(spark, o, files, key_columns)
    if bounds is not None:
        target = target.where(F.col(key_columns[0]).between(int(bounds[0]), int(bounds[1])))
    target = target.select(*key_columns, F.col("_metadata.file_path").alias(_FILE),
                           F.col("_metadata.row_index").alias(_ROW))
    # Up to BROADCAST_KEYS keys are sent whole to every task (no shuffle of the target's
    # key column); above, Spark shuffles both sides and no key set goes through the driver.
    matched = target.join(F.broadcast(keys) if num_keys <= BROADCAST_KEYS else keys, on=key_columns)
    return cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorBitmapGenerator") \
        .buildRowIndexSetsForFilesMatchingCondition(
            spark._jsparkSession, o.txn, True, matched._jdf, seq(spark, files),
            cls(spark, "org.apache.spark.sql.catalyst.expressions.Literal").TrueLiteral(),
            jvm_some(spark, F.col(_FILE)._jc), jvm_some(spark, F.col(_ROW)._jc))


def _mark_deleted(spark: "SparkSession", txn: Any, files: list[Any], vectors: Any) -> tuple[list[Any], dict[str, int]]:
    """The file actions that put the new deletion vectors (over `files`) into the commit, and Delta's counts."""
    helper = cls(spark, "org.apache.spark.sql.delta.commands.DMLWithDeletionVectorsHelper")
    candidates = helper.generateCandidateFileMap(txn.deltaLog().dataPath(), seq(spark, files))
    found = helper.findFilesWithMatchingRows(txn, candidates, vectors)
    touched = pylist(spark, found)
    if all(f.fileLogEntry().stats() for f in touched):
        return _deletion_actions(spark, touched)
    result = helper.processUnmodifiedData(spark._jsparkSession, found, txn.snapshot())  # (actions, counts)
    actions, counts = result._1(), result._2()
    return pylist(spark, actions), {str(k): int(v) for k, v in
                                    cls(spark, "scala.jdk.javaapi.CollectionConverters").asJava(counts).items()}


def _deletion_actions(spark: "SparkSession", touched: list[Any]) -> tuple[list[Any], dict[str, int]]:
    """The file actions for files whose new deletion vectors are written, and their counts:
    a file with every row deleted is removed, the others are re-added with their vector.

    Does what Delta's processUnmodifiedData does, for files that carry their statistics
    (read from the checksum): Delta's helper fetches them with a state reconstruction.
    The statistics turn "wide" as Delta's updateStatsToWideBounds makes them: min/max and
    null counts may now cover deleted rows; a column that was null in every live row
    gets the file's physical row count as null count, so it still reads as all-null.
    """
    from_json = cls(spark, "org.apache.spark.sql.delta.actions.Action").fromJson
    now = int(time.time() * 1000)
    actions: list[Any] = []
    counts = dict.fromkeys(["numModifiedRows", "numRemovedFiles", "numDeletionVectorsAdded",
                            "numDeletionVectorsRemoved", "numDeletionVectorsUpdated"], 0)
    for f in touched:
        entry = f.fileLogEntry()
        had_dv = entry.deletionVector() is not None
        counts["numModifiedRows"] += int(f.numberOfModifiedRows())
        if f.isFullyReplaced():
            actions.append(entry.removeWithTimestamp(now, True))
            counts["numRemovedFiles"] += 1
            counts["numDeletionVectorsRemoved"] += int(had_dv)
            continue
        pair = entry.removeRows(f.newDeletionVector(), False, True)
        add = json.loads(pair._1().json())
        add["add"]["stats"] = _wide_stats(add["add"]["stats"], entry.numDeletedRecords())
        actions += [from_json(json.dumps(add)), pair._2()]
        counts["numDeletionVectorsUpdated" if had_dv else "numDeletionVectorsAdded"] += 1
    return actions, counts


def _wide_stats(stats: str, deleted_before: int) -> str:
    """A file's statistics once rows are deleted from it (see _deletion_actions)."""
    parsed = json.loads(stats)
    if parsed.get("tightBounds", True):
        physical = parsed["numRecords"]
        logical = physical - deleted_before

        def widen(node: dict[str, Any]) -> dict[str, Any]:
            return {k: widen(v) if isinstance(v, dict) else (physical if v == logical else v) for k, v in node.items()}
        if "nullCount" in parsed:
            parsed["nullCount"] = widen(parsed["nullCount"])
        parsed["tightBounds"] = False
    return json.dumps(parsed, separators=(",", ":"))


def record_metrics(spark: "SparkSession", txn: Any, metrics: dict[str, int]) -> None:
    """Operation metrics of the commit, shown by DESCRIBE HISTORY like a MERGE's. The metric
    objects (Spark accumulators) and their map are made once per session and thread (making
    them costs ~75 Py4J round trips), and only a value other than the one it holds from the
    last commit is set (a round trip each: most of a small batch's stay as they were)."""
    def make() -> tuple[Any, dict[str, Any], dict[str, int]]:
        create = cls(spark, "org.apache.spark.sql.execution.metric.SQLMetrics").createMetric
        registered = {name: create(spark._jsc.sc(), name) for name in metrics}
        return scala_map(spark, registered), registered, {}
    scala, registered, held = kept(spark, ("metrics", threading.get_ident(), tuple(metrics)), make)
    for name, value in metrics.items():
        if held.get(name) != int(value):
            registered[name].set(int(value))
            held[name] = int(value)
    txn.registerSQLMetrics(spark._jsparkSession, scala)


def commit_actions(spark: "SparkSession", path: str, txn: Any, actions: list[Any], state: ConsumerState,
            operation: Any) -> int:
    """Commit the file actions with the consumer's txn mark and state, as `operation`; the new version."""
    mark = cls(spark, "org.apache.spark.sql.delta.actions.SetTransaction")(
        app_id(state.key), state.batch, jvm_some(spark, cls(spark, "java.lang.Long").valueOf(int(time.time() * 1000))))
    faults.failpoint("before-commit")
    try:
        with state_commit(spark, state, marked=True):  # its userMetadata goes into this commit's commitInfo
            return int(txn.commit(seq(spark, actions + [mark]), operation))
    except Py4JJavaError as e:
        if "Concurrent" not in e.java_exception.getClass().getName():
            raise
        raise ConflictError(f"{path} was changed by another writer (e.g. OPTIMIZE) while batch {state.batch} was "
                          "applied; nothing of the batch was committed: run the ingest again") from None
