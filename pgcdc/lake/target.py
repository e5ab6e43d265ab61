"""Target: where a table's Delta table lies, how it is created and checked, and the whole-table
copy (first sync, resync) that both engines share, through public API only.

A batch is applied by an engine (pgcdc/engines); a copy overwrites the table in one commit
that carries the consumer state (Delta's txn action + commitInfo.userMetadata, set
through the session confs of `state_commit`).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgcdc.errors import ConflictError, TargetError
from pgcdc.lake import shards, tablelog
from pgcdc.lake.paths import FOLDER, spark_ident
from pgcdc.lake.state import app_id
from pgcdc.spark.jvm import cls
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from pgcdc.settings import TargetSettings

OWNER = "pgcdc.consumer"
SOURCE = "pgcdc.source"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# Delta writes a checkpoint every this many commits (its default: 10). A checkpoint costs
# a state reconstruction and a Parquet write (1-2.5 s on a small table, 2 cores), whatever
# the batch; frequent small batches pay it ten times less often, and a reader that starts
# cold replays up to ~110 small commit files instead of 9. Each table gets an interval of its
# own between CHECKPOINT_INTERVAL and + CHECKPOINT_SPREAD - 1 (checkpoint_interval): tables
# synced at the same pace then write their checkpoints in different runs, not all in one.
CHECKPOINT_INTERVAL = 100
CHECKPOINT_SPREAD = 13


def checkpoint_interval(table: str) -> str:
    """The `delta.checkpointInterval` of the Delta table of source table `table`."""
    return str(CHECKPOINT_INTERVAL + zlib.crc32(table.encode()) % CHECKPOINT_SPREAD)


@dataclass(frozen=True)
class Written:
    """What one Delta commit changed."""

    version: int
    upserted: int
    deleted: int


@contextmanager
def session_confs(spark: "SparkSession", confs: dict[str, str]) -> Iterator[None]:
    """Session confs set for one statement, then restored."""
    before: dict[str, str | None] = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


@contextmanager
def state_commit(spark: "SparkSession", state: ConsumerState, marked: bool = False) -> Iterator[None]:
    """Session confs that put the state into the next Delta commit; always unset after.
    `marked`: the commit carries its txn mark itself (the fast engine's transaction), so only
    the commit's userMetadata is set (a Py4J round trip per conf set and unset)."""
    confs = {USER_METADATA: state.to_json()} if marked else {
        "spark.databricks.delta.write.txnAppId": app_id(state.key),
        "spark.databricks.delta.write.txnVersion": str(state.batch),
        USER_METADATA: state.to_json()}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in confs:
            spark.conf.unset(key)


def _concurrent(exc: Exception) -> bool:
    """True for Delta's conflict errors (another writer committed while ours was written)."""
    java = getattr(exc, "java_exception", None)
    names = [type(exc).__name__, str(java.getClass().getName()) if java is not None else ""]
    return any("Concurrent" in n or n.endswith(("MetadataChangedException", "ProtocolChangedException"))
               for n in names) or "ConcurrentAppendException" in str(exc) or "ConcurrentDelete" in str(exc)


@contextmanager
def conflicts(path: str, what: str) -> Iterator[None]:
    """Turn Delta's conflict with another writer's commit (OPTIMIZE, say) into ConflictError:
    nothing of `what` (a batch, a copy's chunk) was committed, and the next run does it again."""
    try:
        yield
    except Exception as exc:
        if not _concurrent(exc):
            raise
        raise ConflictError(f"{path} was changed by another writer (e.g. OPTIMIZE) while {what} was applied; "
                            f"nothing of it was committed: run the ingest again") from None


def is_delta(spark: "SparkSession", path: str) -> bool:
    """True if `path` holds a Delta table (a committed version in its log)."""
    return tablelog.latest_version(spark, path) >= 0


def properties(target: "TargetSettings") -> dict[str, str]:
    """The Delta table properties `target` asks for (docs/configuration.md, [target])."""
    props = {"delta.enableDeletionVectors": str(target.deletion_vectors).lower()}
    if target.change_data_feed or target.history:  # (the history is folded from it: lake/history.py)
        props["delta.enableChangeDataFeed"] = "true"
    if target.row_tracking:
        props["delta.enableRowTracking"] = "true"
    return props


@dataclass(frozen=True)
class NewTable:
    """A Delta table to create: its columns as PostgreSQL has them (`schema`), key columns, its
    consumer and source table (or fan-in name); a fan-in's (`fan_in`: with the shard column,
    which it is partitioned by, lake/shards.py), or partitioned by `partition_by`
    (`attach --delta-partition-by`), if given."""

    schema: "StructType"
    keys: list[str]
    consumer: str
    table: str
    fan_in: bool = False
    partition_by: list[str] | None = None
    ids: dict[str, int] | None = None  # PostgreSQL's number of each column (lake/evolve.py), not a fan-in's


def create_table(spark: "SparkSession", path: str, new: NewTable, target: "TargetSettings") -> None:
    """Create the empty Delta table, marked with its consumer and source table (or fan-in name),
    with the properties the [target] settings ask for; its columns as PostgreSQL has them (the
    key columns NOT NULL) without the JDBC reader's field metadata. A fan-in's sources create it
    one at a time (sync/copies.py, `create_target`).

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

    schema, keys = new.schema, new.keys
    if new.fan_in:
        schema, keys = shards.add_column(schema), [*keys, shards.SHARD]
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(_table_schema(schema, keys))
    if new.fan_in or new.partition_by:
        builder = builder.partitionedBy(*([shards.SHARD] if new.fan_in else new.partition_by or []))
    mapping = _COLUMN_MAPPING if needs_column_mapping(schema) else {}
    ids = {} if new.ids is None else {COLUMNS: json.dumps(new.ids)}
    for key, value in {OWNER: new.consumer, SOURCE: new.table, "delta.checkpointInterval": checkpoint_interval(new.table),
                       **properties(target), **mapping, **ids}.items():
        builder = builder.property(key, value)
    builder.execute()


def _table_schema(schema: "StructType", keys: list[str]) -> "StructType":
    """`schema` with only the key columns NOT NULL and no field metadata."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, f.name not in keys) for f in schema.fields])


def _foreign_file(fs: Any, folder: Any, rows: bool = False) -> str | None:
    """A file under `folder` (a Hadoop Path on file system `fs`) that is not a leftover of an
    unfinished create, or None.

    A create killed before its first commit leaves Delta's log folders (`_delta_log`,
    `_delta_log/_staged_commits`) and maybe the commit's hidden temporary file; pgcdc's own
    folder may hold state; a create that writes rows (`rows`) its data files too. Anything else
    is somebody's data."""
    if not fs.exists(folder):
        return None
    files = fs.listFiles(folder, True)
    root = fs.makeQualified(folder).toString().rstrip("/") + "/"
    while files.hasNext():
        relative = files.next().getPath().toString()[len(root):]
        if not (relative.startswith(FOLDER + "/") or re.fullmatch(r"_delta_log/(_staged_commits/)?\.[^/]*", relative)
                or rows and re.fullmatch(r"\.?part-[^/]*\.parquet(\.crc)?|_SUCCESS|\._SUCCESS\.crc", relative)):
            return str(relative)
    return None


def clear_unfinished_create(spark: "SparkSession", path: str) -> None:
    """Remove what a create writing its rows, killed before its first commit, left at `path` (a
    folder without a Delta version): Delta's log folders and the rows' data files, which Delta's
    create trips over. The caller must be the only one creating it (another's create under way
    looks the same). TargetError naming a file that is somebody else's."""
    folder = cls(spark, "org.apache.hadoop.fs.Path")(path)
    fs = folder.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(folder) or tablelog.latest_version(spark, path) >= 0:
        return
    if (foreign := _foreign_file(fs, folder, rows=True)) is not None:
        raise TargetError(f"{path} holds files but is not a Delta table (e.g. {foreign}); move them away")
    fs.delete(folder, True)


def check_owner(spark: "SparkSession", path: str, consumer: str, table: str | None, fan_in: bool = False) -> None:
    """Refuse a Delta table that another consumer, another source table (or fan-in), or nobody
    from pgcdc owns. `table` None: the consumer's state records this place for the table (its
    name may have changed since the Delta table was created). `fan_in`: the table is a fan-in's
    (its shard column is a partition column), else a single table's."""
    log = tablelog.read_state(spark, path, need_txns=False)
    props = log.configuration
    owner, source = props.get(OWNER), props.get(SOURCE)
    if owner is not None and (shards.SHARD in (log.metadata.get("partitionColumns") or [])) != fan_in:
        raise TargetError(f"Delta table {path} is {'not ' if fan_in else ''}a fan-in's ({source} of consumer {owner}) "
                          f"but {table or 'the table'} lands there {'as' if fan_in else 'not as'} a fan-in's source; "
                          "set another target.root, or move that table away")
    if owner is None:
        raise TargetError(f"Delta table {path} was not created by pgcdc; choose another target.root or move that "
                          f"table away, or, if it holds {table or 'the table'}'s rows, take it over with `pgcdc adopt "
                          f"{table or 'TABLE'}` (only the rows that differ are rewritten)")
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
COLUMNS = "pgcdc.columns"  # table property: {Delta column name: PostgreSQL attnum} (lake/evolve.py)


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


def last_commit(spark: "SparkSession", path: str, state: ConsumerState) -> Written:
    """Find the commit that carries `state` among the newest 20 (their commitInfo, read from the
    log's commit files) and read its row counts; fail if the write was skipped."""
    newest = tablelog.latest_version(spark, path)
    for version in range(newest, max(-1, newest - 20), -1):
        info = tablelog.commit_info(spark, path, version)
        meta = ConsumerState.from_json(info["userMetadata"]) if info.get("userMetadata") else None
        if meta and meta.run_id == state.run_id:
            m = info.get("operationMetrics") or {}
            # (a replaceWhere's numOutputRows counts the rows it copied from the files it rewrote too)
            upserted = int(m.get("numTargetRowsInserted", m.get("numOutputRows", 0))) - \
                int(m.get("numCopiedRows", 0)) + int(m.get("numTargetRowsUpdated", 0))
            deleted = int(m.get("numTargetRowsDeleted", 0))
            return Written(version, upserted, deleted)
    raise TargetError(f"batch {state.batch} of consumer {state.consumer} was not committed to {path}: another "
                      "writer already committed that batch number; is a second ingest running elsewhere?")


def map_columns_if_needed(spark: "SparkSession", path: str, log: "tablelog.LogState", schema: "StructType") -> None:
    """Turn column mapping on (before a write that sets the table's schema) if a column name of
    `schema` needs it and the table (as `log` has it) does not have it yet."""
    if needs_column_mapping(schema):
        map_columns(spark, path, log)


def maps_columns(log: "tablelog.LogState") -> bool:
    """Whether the table (as `log` has it) has column mapping on."""
    return log.configuration.get("delta.columnMapping.mode", "none") != "none"


def map_columns(spark: "SparkSession", path: str, log: "tablelog.LogState") -> None:
    """Turn column mapping (name) on, where the table does not have it yet: a metadata commit
    (each column's physical name stays its name)."""
    if not maps_columns(log):
        props = ", ".join(f"'{k}' = '{v}'" for k, v in _COLUMN_MAPPING.items())
        spark.sql(f"alter table delta.{spark_ident(path)} set tblproperties ({props})")


def adopt(spark: "SparkSession", path: str, consumer: str, table: str) -> bool:
    """Mark a Delta table another writer made as the consumer's table of `table` (one metadata
    commit), so runs sync it; False if it is the consumer's already. Refuses one that another
    consumer (or source table) owns, or a fan-in's."""
    log = tablelog.read_state(spark, path, need_txns=False)
    owner, source = log.configuration.get(OWNER), log.configuration.get(SOURCE)
    if owner == consumer and source == table:
        return False
    if owner is not None:
        raise TargetError(f"Delta table {path} belongs to consumer {owner} (source {source}) already: adopt takes over "
                          "only a Delta table pgcdc did not make; set another consumer name or target.root")
    props = ", ".join(f"'{k}' = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in
                      {OWNER: consumer, SOURCE: table, "delta.checkpointInterval": checkpoint_interval(table)}.items())
    with conflicts(path, "taking the table over"):
        spark.sql(f"alter table delta.{spark_ident(path)} set tblproperties ({props})")
    return True
