"""Apply: write a batch into its Delta table in one commit that also carries the consumer state.

One commit per table per batch with a MERGE's effect (update matched keys, insert new
keys, delete keys whose row is gone), done as: deletion vectors over the old rows of the batch's keys
plus new files with the current rows. The state rides in the same commit (Delta's txn
action + commitInfo). First syncs and re-syncs overwrite the table in one commit.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError

from pgcdc import driver_marks, driver_write, faults
from pgcdc.deltalog import (files_overlapping, latest_snapshot, read_all_files, read_committed_version, renames_columns,
                            stored_rows)
from pgcdc.errors import TargetError
from pgcdc.jvm import alongside, cls, none as jvm_none, optional, pylist, scala_map, seq, some as jvm_some
from pgcdc.state import FOLDER, ConsumerState, app_id

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from pgcdc.enrich import BatchRead

OWNER = "pgcdc.consumer"
SOURCE = "pgcdc.source"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_FILE, _ROW = "__pgcdc_file", "__pgcdc_row"
BROADCAST_KEYS = 2_000_000
# Delta writes a checkpoint every this many commits (its default: 10). A checkpoint costs
# a state reconstruction and a Parquet write (~2.5 s on a small table, 2 cores), whatever
# the batch; frequent small batches pay it ten times less often, and a reader that starts
# cold replays up to 99 small commit files instead of 9.
CHECKPOINT_INTERVAL = "100"


@dataclass(frozen=True)
class Written:
    """What one Delta commit changed."""

    version: int
    upserted: int
    deleted: int


def check_target_root(root: str) -> str:
    """Check that a local target root can hold Delta tables (it is made if missing); return
    what was checked. TargetError if not. A remote root (s3a://, ...) is checked by Spark."""
    import tempfile

    from pgcdc.state import local_folder

    folder = local_folder(root)
    if folder is None:
        return f"{root} (remote: checked when Spark first writes)"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".pgcdc-check-"):
            pass
    except OSError as exc:
        raise TargetError(f"target.root {root} is not writable ({exc.strerror}); make it writable for this user "
                          "or point target.root elsewhere") from None
    return f"{folder.resolve()} (writable)"


def target_path(root: str, table: str) -> str:
    """Where a table lands: <root>/<schema>.<table>, names as in PostgreSQL (unquoted);
    a relative local root is taken from the current directory."""
    schema, name = _split(table)
    folder = f"{schema}.{name}".replace("/", "%2F")
    return f"{target_root(root)}/{folder}"


def target_root(root: str) -> str:
    """The folder or URI every table's Delta table lies under (a relative local root resolved)."""
    from pathlib import Path

    return (root if "://" in root else str(Path(root).resolve())).rstrip("/")


def _split(table: str) -> tuple[str, str]:
    """Split a canonical 'schema.table' name (either part may be "quoted") into raw names."""
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."]+)', table)
    names = [q.replace('""', '"') if q else p for q, p in parts]
    if len(names) != 2:
        raise ValueError(f"not a schema-qualified table name: {table}")
    return names[0], names[1]


def _col(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@contextmanager
def state_commit(spark: "SparkSession", state: ConsumerState) -> Iterator[None]:
    """Session confs that put the state into the next Delta commit; always unset after."""
    confs = {"spark.databricks.delta.write.txnAppId": app_id(state.consumer),
             "spark.databricks.delta.write.txnVersion": str(state.batch),
             USER_METADATA: state.to_json()}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in confs:
            spark.conf.unset(key)


def is_delta(spark: "SparkSession", path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def create_table(spark: "SparkSession", path: str, schema: "StructType", consumer: str, table: str) -> None:
    """Create the empty Delta table, marked with its consumer and source table.

    Refuses a path that already holds files but no Delta log: they are somebody's data.
    """
    from delta.tables import DeltaTable

    folder = cls(spark, "org.apache.hadoop.fs.Path")(path)
    fs = folder.getFileSystem(spark._jsc.hadoopConfiguration())
    foreign = _foreign_file(fs, folder)
    if foreign is not None:
        raise TargetError(f"{path} holds files but is not a Delta table (e.g. {foreign}); move them away or choose "
                          "another target.root (pgcdc creates its tables in empty places only)")
    log = cls(spark, "org.apache.hadoop.fs.Path")(folder, "_delta_log")
    if fs.exists(log):  # an unfinished create's leftovers, which Delta's create trips over
        fs.delete(log, True)

    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    mapping = _COLUMN_MAPPING if needs_column_mapping(schema) else {}
    for key, value in {OWNER: consumer, SOURCE: table, "delta.enableDeletionVectors": "true",
                       "delta.checkpointInterval": CHECKPOINT_INTERVAL, **mapping}.items():
        builder = builder.property(key, value)
    builder.execute()


def _foreign_file(fs: Any, folder: Any) -> str | None:
    """A file under `folder` (a Hadoop Path on file system `fs`) that is not a leftover of an
    unfinished create, or None.

    A create killed before its first commit leaves Delta's log folders (`_delta_log`,
    `_delta_log/_staged_commits`) and maybe the commit's hidden temporary file; pgcdc's own
    folder may hold state. Anything else is somebody's data."""
    if not fs.exists(folder):
        return None
    files = fs.listFiles(folder, True)
    root = fs.makeQualified(folder).toString().rstrip("/") + "/"
    while files.hasNext():
        relative = files.next().getPath().toString()[len(root):]
        if not (relative.startswith(FOLDER + "/") or re.fullmatch(r"_delta_log/(_staged_commits/)?\.[^/]*", relative)):
            return relative
    return None


def check_owner(spark: "SparkSession", path: str, consumer: str, table: str | None) -> None:
    """Refuse a Delta table that another consumer, another source table, or nobody from pgcdc owns.
    `table` None: the consumer's state records this place for the table (its name may have changed
    since the Delta table was created)."""
    props = latest_snapshot(spark, path).metadata().configuration()
    owner, source = optional(props.get(OWNER)), optional(props.get(SOURCE))
    if owner is None:
        raise TargetError(f"Delta table {path} was not created by pgcdc; choose another target.root "
                          "or move that table away")
    if owner != consumer or (table is not None and source != table):
        raise TargetError(f"Delta table {path} belongs to consumer {owner} (source {source}), not to consumer "
                          f"{consumer} (source {table}); set another consumer name or target.root")


# Characters Delta accepts in column names only with column mapping
_NEEDS_MAPPING = re.compile(r"[ ,;{}()\n\t=]")


def needs_column_mapping(schema: "StructType") -> bool:
    """True if a column name holds a character Delta accepts only with column mapping
    (DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES). Only such tables get it: with it, the
    Parquet files name the columns otherwise, so batches cannot take the driver's paths."""
    return any(_NEEDS_MAPPING.search(f.name) for f in schema.fields)


_COLUMN_MAPPING = {"delta.columnMapping.mode": "name"}


def schema_change(target: "StructType", source: "StructType") -> str | None:
    """How the source's columns (as the sync reads them) differ from the Delta table's, or None.

    Applying batches across such a change would leave rows wrong: an added column null where
    PostgreSQL filled its default in, a dropped or retyped one stale. The table is copied
    instead (or its sync stops, see the `on_schema_change` setting)."""
    have = {f.name: f.dataType for f in target.fields}
    want = {f.name: f.dataType for f in source.fields}
    parts = []
    if added := [n for n in want if n not in have]:
        parts.append(f"added {', '.join(added)}")
    if dropped := [n for n in have if n not in want]:
        parts.append(f"dropped {', '.join(dropped)}")
    if retyped := [f"{n} {have[n].simpleString()} -> {want[n].simpleString()}" for n in have
                   if n in want and want[n] != have[n]]:
        parts.append(f"retyped {', '.join(retyped)}")
    return "; ".join(parts) or None


def _last_commit(spark: "SparkSession", path: str, state: ConsumerState) -> Written:
    """Find the commit that carries `state` and read its row counts; fail if the write was skipped."""
    from delta.tables import DeltaTable

    for row in DeltaTable.forPath(spark, path).history(20).collect():
        meta = ConsumerState.from_json(row.userMetadata) if row.userMetadata else None
        if meta and meta.run_id == state.run_id:
            m = row.operationMetrics or {}
            upserted = int(m.get("numTargetRowsInserted", m.get("numOutputRows", 0))) + \
                int(m.get("numTargetRowsUpdated", 0))
            deleted = int(m.get("numTargetRowsDeleted", 0))
            return Written(int(row.version), upserted, deleted)
    raise TargetError(f"batch {state.batch} of consumer {state.consumer} was not committed to {path}: another "
                      "writer already committed that batch number; is a second ingest running elsewhere?")


def overwrite(spark: "SparkSession", path: str, rows: "DataFrame", state: ConsumerState) -> Written:
    """Replace the table's contents (first sync or resync) in one commit carrying the state;
    a column renamed to a name that needs column mapping turns it on first."""
    if needs_column_mapping(rows.schema) and not renames_columns(latest_snapshot(spark, path)):
        props = ", ".join(f"'{k}' = '{v}'" for k, v in _COLUMN_MAPPING.items())
        spark.sql(f"alter table delta.{_col(path)} set tblproperties ({props})")
    with state_commit(spark, state):  # overwriteSchema: a resync takes the source's current columns
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
    return _last_commit(spark, path, state)


def merge(spark: "SparkSession", path: str, read: "BatchRead", state: ConsumerState, before_commit: Callable[[], None],
          bounds: tuple[int, int] | None = None, keys: "Callable[[], pa.Array] | None" = None,
          local_rows: "Callable[[], pa.Table | None] | None" = None) -> Written:
    """Apply one batch in one Delta commit that also carries the state.

    Every Delta row whose key is in the batch (`read.keys`) is marked deleted with a
    deletion vector, and the batch's live rows (`read.rows`) are written as new files:
    update matched, insert new, delete gone, as a MERGE would, but with one join of the
    keys against the target's key column instead of Delta MERGE's three passes, and no
    unchanged row rewritten. (A batch holding a TRUNCATE is never merged: it is copied.) `bounds`
    (lowest, highest key of a one-column integer key) lets Delta skip the files whose key
    range lies outside the batch. `keys` (gives the same keys, of a batch with a one-column
    key, read into the driver) lets the driver find the rows (driver_marks, its own key
    bounds) while Spark writes `read.rows`; else Spark joins `read.keys` to the stored key
    column. `local_rows` (gives the same as `read.rows`, read on the driver, with `keys`)
    lets the driver write them too (driver_write); where it gives None, Spark writes.
    `before_commit` runs once every row is read and written, right before the commit.
    """
    from pyspark import StorageLevel

    started = time.monotonic()
    txn = cls(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path).startTransaction()
    if read_committed_version(txn, app_id(state.consumer)) >= state.batch:
        raise TargetError(f"batch {state.batch} of consumer {state.consumer} is already committed to {path}: "
                          "is a second ingest running elsewhere?")
    if str(optional(txn.metadata().configuration().get("delta.enableDeletionVectors"))).lower() != "true":
        raise TargetError(f"deletion vectors are turned off on {path}; pgcdc applies batches with them: turn them on "
                          f"again (ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = "
                          "'true')) and run the ingest again")
    # Reading the whole file list records it in the transaction: a concurrent rewrite of
    # those files (OPTIMIZE elsewhere) makes this commit fail instead of resurrecting rows.
    files = pylist(spark, read_all_files(txn))
    if keys is not None and not renames_columns(txn):
        added, (files, vectors, num_keys) = alongside(  # the rows are written while the old ones are found
            lambda: _write_rows(spark, txn, read, local_rows),
            lambda: _found_on_driver(spark, txn, files, read, keys()))
        return _apply(spark, path, txn, files, vectors, num_keys, read, state, before_commit, started, added)
    if bounds is not None:  # files whose key range misses the batch hold none of its keys
        files = files_overlapping(files, read.key_columns[0], *bounds)
    key_frame = read.keys.persist(StorageLevel.MEMORY_AND_DISK)  # read once from PostgreSQL: counted, then joined
    try:
        num_keys = key_frame.count()
        vectors = _matched_rows(spark, txn, files, key_frame, num_keys, bounds)
        return _apply(spark, path, txn, files, vectors, num_keys, read, state, before_commit, started)
    finally:
        key_frame.unpersist()


def _found_on_driver(spark: "SparkSession", txn: Any, files: list[Any], read: "BatchRead",
                     keys: "pa.Array") -> tuple[list[Any], Any, int]:
    """The files that may hold `keys` (by their key range), the deletion vectors over their
    rows of `keys` (found by the driver; by a Spark join if a file is not on the local file
    system), and the number of keys."""
    from pgcdc.enrich import array_bounds

    bounds = array_bounds(keys)
    if bounds is not None:
        files = files_overlapping(files, read.key_columns[0], *bounds)
    paths = driver_marks.local_paths(txn, files)
    if paths is None:
        vectors = _matched_rows(spark, txn, files, read.keys, len(keys), bounds)
    else:
        vectors = driver_marks.deletion_vectors(spark, txn, files, paths, read.key_columns[0], keys)
    return files, vectors, len(keys)


def _write_rows(spark: "SparkSession", txn: Any, read: "BatchRead",
                local_rows: "Callable[[], pa.Table | None] | None") -> list[Any]:
    """Write the batch's live rows: by the driver where it has them (`local_rows`), else by
    a Spark job; their AddFiles."""
    table = local_rows() if local_rows is not None else None
    added = driver_write.write(spark, txn, table, read.key_columns[0]) if table is not None else None
    return added if added is not None else pylist(spark, txn.writeFiles(read.rows._jdf))


def _apply(spark: "SparkSession", path: str, txn: Any, files: list[Any], vectors: Any, num_keys: int,
           read: "BatchRead", state: ConsumerState, before_commit: Callable[[], None], started: float,
           added: list[Any] | None = None) -> Written:
    """Commit the rows' new files (`added`, written by the driver; if None, Spark writes them
    now) with the deletion vectors (`vectors`, over `files`) and the state."""
    removals, dv_metrics = _mark_deleted(spark, txn, files, vectors)
    if added is None:
        added = _write_rows(spark, txn, read, None)
    upserted = sum(json.loads(a.stats()).get("numRecords", 0) for a in added if a.stats())
    _record_metrics(spark, txn, {
        "operationNumSourceRows": num_keys, "numOutputRows": upserted, "numTargetRowsCopied": 0,
        "numTargetFilesAdded": len(added), "numTargetFilesRemoved": dv_metrics.get("numRemovedFiles", 0),
        "numTargetDeletionVectorsAdded": dv_metrics.get("numDeletionVectorsAdded", 0),
        "numTargetDeletionVectorsRemoved": dv_metrics.get("numDeletionVectorsRemoved", 0),
        "numTargetDeletionVectorsUpdated": dv_metrics.get("numDeletionVectorsUpdated", 0),
        "executionTimeMs": int((time.monotonic() - started) * 1000)})
    before_commit()
    version = _commit(spark, path, txn, removals + added, state)
    return Written(version, upserted, num_keys - upserted)  # deleted: keys without a current row


def _matched_rows(spark: "SparkSession", txn: Any, files: list[Any], keys: "DataFrame", num_keys: int,
                  bounds: tuple[int, int] | None) -> Any:
    """Deletion vectors (Delta's DeletionVectorResults, written) over every row of `files`
    whose key is in `keys`, found by a Spark join."""
    from pyspark.sql import functions as F

    if not files:
        return seq(spark, [])
    key_columns = keys.columns
    target = stored_rows(spark, txn, files, key_columns)
    if bounds is not None:
        target = target.where(F.col(key_columns[0]).between(int(bounds[0]), int(bounds[1])))
    target = target.select(*key_columns, F.col("_metadata.file_path").alias(_FILE),
                           F.col("_metadata.row_index").alias(_ROW))
    # Up to BROADCAST_KEYS keys are sent whole to every task (no shuffle of the target's
    # key column); above, Spark shuffles both sides and no key set goes through the driver.
    matched = target.join(F.broadcast(keys) if num_keys <= BROADCAST_KEYS else keys, on=key_columns)
    return cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorBitmapGenerator") \
        .buildRowIndexSetsForFilesMatchingCondition(
            spark._jsparkSession, txn, True, matched._jdf, seq(spark, files),
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


def _record_metrics(spark: "SparkSession", txn: Any, metrics: dict[str, int]) -> None:
    """Operation metrics of the commit, shown by DESCRIBE HISTORY like a MERGE's."""
    create = cls(spark, "org.apache.spark.sql.execution.metric.SQLMetrics").createMetric
    registered = {}
    for name, value in metrics.items():
        registered[name] = create(spark._jsc.sc(), name)
        registered[name].set(int(value))
    txn.registerSQLMetrics(spark._jsparkSession, scala_map(spark, registered))


def _commit(spark: "SparkSession", path: str, txn: Any, actions: list[Any], state: ConsumerState) -> int:
    """Commit the file actions with the consumer's txn mark and state, as a MERGE; the new version."""
    mark = cls(spark, "org.apache.spark.sql.delta.actions.SetTransaction")(
        app_id(state.consumer), state.batch, jvm_some(spark, cls(spark, "java.lang.Long").valueOf(int(time.time() * 1000))))
    operation = cls(spark, "org.apache.spark.sql.delta.DeltaOperations$Merge")(*[jvm_none(spark)] * 4,
                                                                             *[seq(spark, [])] * 3)
    faults.failpoint("before-commit")
    try:
        with state_commit(spark, state):  # its userMetadata goes into this commit's commitInfo
            return int(txn.commit(seq(spark, actions + [mark]), operation))
    except Py4JJavaError as e:
        if "Concurrent" not in e.java_exception.getClass().getName():
            raise
        raise TargetError(f"{path} was changed by another writer (e.g. OPTIMIZE) while batch {state.batch} was "
                          "applied; nothing of the batch was committed: run the ingest again") from None
