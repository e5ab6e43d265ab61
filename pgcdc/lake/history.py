"""History (`[target] history = true`): beside each Delta table, `<table>__history`, a slowly
changing dimension of type 2 (docs/history.md).

The history is derived from the mirror's own log, never from PostgreSQL: the mirror has the
change data feed on, and `catch_up` folds the mirror's commits after the last one the
history holds into one history commit, which records the mirror version it reached in its
`txn` action (appId APP_ID). One Delta commit cannot span two tables, so the two stay exact
by order, not by one commit: the mirror commits first; the history follows in the same run
(Job.finish) or, after a kill between the two, in the next run to reach the table, which
finds the history behind the mirror and folds the same committed versions (they never
change, and the txn action makes the fold happen once).

A row version is the row as one mirror commit left it, opened by the first commit (a batch, a
copy, a chunk of one) that wrote those values and closed by the next that changed or removed
them: `_pgcdc_from_version`/`_pgcdc_to_version` are the mirror's Delta versions,
`_pgcdc_valid_from`/`_pgcdc_valid_to` their commit times, `_pgcdc_watermark` the source
watermark of the opening commit. A commit that rewrote a row with the same values (a copy, a
batch whose key changed back) opens no version. With soft deletes, a row marked deleted
counts as gone; pgcdc's own columns never enter the history.

Commits that changed the mirror's schema, and ranges whose change data the log no longer
has, are folded as a snapshot: the mirror as of that version against the history's current
rows (closing what it lacks, opening what is new or changed). Old versions are never rewritten.

A new history is created holding its first versions, the mirror's live rows, in one commit
(nothing to close: no MERGE), so of two folds starting a history at once one creates it and
the other folds what follows. Folds of one history in one process take turns (a fan-in's
sources, applied in lanes beside each other); across processes, Delta's conflict on the txn
action and the MERGE's conditions keep them exact.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pgcdc.errors import ConflictError, TargetError
from pgcdc.lake import landing, tablelog
from pgcdc.lake.history_states import Commit, columns, commit, live, states
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.target import (OWNER, SOURCE, clear_unfinished_create, conflicts, map_columns_if_needed,
                               needs_column_mapping, session_confs)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

SUFFIX = "__history"
APP_ID = "pgcdc:history"
VALID_FROM = "_pgcdc_valid_from"
VALID_TO = "_pgcdc_valid_to"
IS_CURRENT = "_pgcdc_is_current"
FROM_VERSION = "_pgcdc_from_version"
TO_VERSION = "_pgcdc_to_version"
WATERMARK = "_pgcdc_watermark"
NAMES = (VALID_FROM, VALID_TO, IS_CURRENT, FROM_VERSION, TO_VERSION, WATERMARK)
_CDF = "delta.enableChangeDataFeed"
# what Spark's error says when a file of the versions to fold is gone
_GONE = ("CHANGE_DATA", "change data", "FILE_NOT_FOUND", "FileNotFound")
_turns: dict[str, threading.Lock] = {}  # a lock per history path: folds of one history take turns
_turns_lock = threading.Lock()


def history_path(path: str) -> str:
    """Where the history of the Delta table at `path` lies: beside it, `<folder>__history`."""
    return path.rstrip("/") + SUFFIX


def history_name(table: str) -> str:
    """The history's table name for a source (or fan-in) table name."""
    return table + SUFFIX


@dataclass(frozen=True)
class Folded:
    """What one catch-up did: the mirror versions it folded and the versions it opened and closed."""

    first: int
    last: int
    opened: int
    closed: int

    def line(self, table: str) -> str:
        span = f"version {self.last}" if self.first == self.last else f"versions {self.first}-{self.last}"
        return f"{table}: history follows the mirror's {span}: {self.opened} row versions opened, {self.closed} closed"


def folded_version(spark: "SparkSession", path: str) -> int:
    """The mirror version the history of the table at `path` holds (-1: no history yet)."""
    hpath = history_path(path)
    return tablelog.txn_version(spark, hpath, APP_ID) if tablelog.latest_version(spark, hpath) >= 0 else -1


def started_behind(spark: "SparkSession", path: str) -> bool:
    """True if the history exists and lacks some of the mirror's commits (a run killed between
    the two): it must fold them before the mirror commits again, so that a fold never spans a
    schema change pgcdc makes (Delta's change data feed cannot read versions from before a
    column was dropped in the newest schema)."""
    return 0 <= folded_version(spark, path) < tablelog.latest_version(spark, path)


def behind(spark: "SparkSession", path: str) -> bool:
    """True if the history lacks some of the mirror's commits (a kill between the two, or history
    newly turned on)."""
    return folded_version(spark, path) < tablelog.latest_version(spark, path)


@dataclass(frozen=True)
class Of:
    """Whose history a fold folds: the mirror's key columns; whether rows marked deleted count as
    gone (`soft`); the consumer and table (or fan-in) it belongs to; the columns the table's
    choice leaves out (docs/columns.md), which the history then holds in no version; and
    whether no other process may be folding it (`alone`: the table's lease is held)."""

    keys: list[str]
    soft: bool
    consumer: str
    table: str
    leaves_out: "Callable[[str], bool]" = lambda _: False
    alone: bool = False


def catch_up(spark: "SparkSession", path: str, of: Of) -> Folded | None:
    """Fold every mirror commit the history of the table at `path` (`of`) lacks into it, in one
    history commit; None if it had them all.
    Folds of one history in this process take turns; one in another process (a worker of the
    consumer folding a fan-in's history) whose commit wins makes this one fold again from what
    it left (a fold it covered already is skipped by Delta: its txn version is not above the
    one committed)."""
    with _turns_lock:
        turn = _turns.setdefault(history_path(path), threading.Lock())
    with turn:
        for attempt in range(3):
            try:
                return _catch_up(spark, path, of)
            except ConflictError:
                if attempt == 2:
                    raise
    return None


def _catch_up(spark: "SparkSession", path: str, of: Of) -> Folded | None:
    hpath, keys = history_path(path), of.keys
    newest = tablelog.latest_version(spark, path)
    done = folded_version(spark, path)
    if done >= newest:
        return None
    log = tablelog.read_state(spark, path, need_txns=False)
    feed = str(log.configuration.get(_CDF, "false")).lower() == "true"
    if not feed:  # (turned on now; until then the mirror's changes were not kept: a snapshot)
        spark.sql(f"alter table delta.{spark_ident(path)} set tblproperties ('{_CDF}' = 'true')")
        newest = tablelog.latest_version(spark, path)
        log = tablelog.read_state(spark, path, need_txns=False)
    data = _data_schema(log.schema())
    if done < 0 and tablelog.latest_version(spark, hpath) < 0:
        first = commit(spark, path, newest)
        if (opened := _create(spark, hpath, path, data, first, of)) is not None:
            return Folded(newest, newest, opened, 0)
        done = folded_version(spark, path)  # (another fold created it first: fold what follows)
        if done >= newest:
            return None
    _prepare(spark, hpath, data, of)
    if done < 0 or not feed:  # a new history starts from the mirror as it is now
        commits = [replace(commit(spark, path, newest), snapshot=True)]
    else:
        commits = [commit(spark, path, v) for v in range(done + 1, newest + 1)]
    current = _current(spark, hpath, data)
    try:
        opened, closed = _apply(spark, hpath, keys, data, states(spark, path, keys, data, commits, of.soft, current),
                                commits, newest, None if done < 0 or feed else done + 1)
    except Exception as exc:  # a file the change data needs is gone (VACUUM): the mirror as it is now
        if not any(s in str(exc) for s in _GONE):
            raise
        commits = [replace(commit(spark, path, newest), snapshot=True)]
        opened, closed = _apply(spark, hpath, keys, data, states(spark, path, keys, data, commits, of.soft, current),
                                commits, newest, done + 1)
    return Folded(commits[0].version, newest, opened, closed)


def _data_schema(schema: "StructType") -> "StructType":
    """The mirror's columns that enter the history (not pgcdc's own)."""
    from pyspark.sql.types import StructType

    return StructType([f for f in schema.fields if f.name not in landing.NAMES])


def _fields() -> "list[Any]":
    from pyspark.sql.types import BooleanType, LongType, StructField, TimestampType

    return [StructField(VALID_FROM, TimestampType()), StructField(VALID_TO, TimestampType()),
            StructField(IS_CURRENT, BooleanType()), StructField(FROM_VERSION, LongType()),
            StructField(TO_VERSION, LongType()), StructField(WATERMARK, LongType())]


def _properties(schema: "StructType", consumer: str, table: str) -> dict[str, str]:
    props = {OWNER: consumer, SOURCE: history_name(table)}
    if needs_column_mapping(schema):
        props["delta.columnMapping.mode"] = "name"
    return props


def _create(spark: "SparkSession", hpath: str, path: str, data: "StructType", first: Commit, of: Of) -> int | None:
    """Create the history holding the mirror's live rows as of `first`, each a current version
    opened by it, in one commit marked like a fold's: the rows opened, or None if another fold
    created the history first. With `of.alone` no other process may be creating it (the table's
    lease is held: not a fan-in's), so what a killed create left is cleared first."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    mirror = spark.read.format("delta").option("versionAsOf", first.version).load(path)
    schema = StructType([StructField(f.name, f.dataType, True) for f in data.fields] + _fields())
    rows = mirror.where(live(of.soft, mirror)).select(
        *columns(data, mirror), F.timestamp_millis(F.lit(first.millis)).alias(VALID_FROM),
        F.lit(None).cast("timestamp").alias(VALID_TO), F.lit(True).alias(IS_CURRENT),
        F.lit(first.version).cast("long").alias(FROM_VERSION), F.lit(None).cast("long").alias(TO_VERSION),
        F.lit(first.watermark).cast("long").alias(WATERMARK)).to(schema)
    writer = rows.writeTo(f"delta.{spark_ident(hpath)}").using("delta")
    for k, v in _properties(schema, of.consumer, of.table).items():
        writer = writer.tableProperty(k, v)
    if of.alone:  # (a create killed before its commit left files that Delta's create trips over)
        clear_unfinished_create(spark, hpath)
    try:
        with session_confs(spark, _marked(first.version, None)):
            writer.create()
    except Exception as exc:
        if tablelog.latest_version(spark, hpath) < 0:
            if "ALREADY_EXISTS" in str(exc):
                raise TargetError(f"{hpath} holds the files of a history whose creation did not finish (a kill), or "
                                  "another's: once no run of the consumer is folding it, remove the folder; the next "
                                  "run creates the history again") from None
            raise
        return None
    return int((tablelog.commit_info(spark, hpath, 0).get("operationMetrics") or {}).get("numOutputRows", 0))


def _marked(newest: int, unseen: int | None) -> dict[str, str]:
    """The session confs that mark a history commit as the fold up to mirror version `newest`
    (its txn action; its metadata also names the versions from `unseen` it could not see)."""
    meta = {"mirror_version": newest} | ({"unseen_versions": [unseen, newest - 1]}
                                         if unseen is not None and unseen < newest else {})
    return {"spark.databricks.delta.write.txnAppId": APP_ID, "spark.databricks.delta.write.txnVersion": str(newest),
            "spark.databricks.delta.commitInfo.userMetadata": json.dumps(meta)}


def _prepare(spark: "SparkSession", hpath: str, data: "StructType", of: Of) -> None:
    """Check the history is this table's, rewrite it without the columns the table now leaves
    out, and add the mirror's new columns to it; refuse a column whose type changed (the
    history's old versions keep the old one)."""
    from pyspark.sql.types import StructType

    consumer, table = of.consumer, of.table
    log = tablelog.read_state(spark, hpath, need_txns=False)
    marker = history_name(table)
    if log.version < 0:  # (made by _create: gone since)
        raise TargetError(f"{hpath}: the history of {table} was removed while it was folded; run the ingest again")
    props = log.configuration
    if props.get(OWNER) != consumer or props.get(SOURCE) != marker:
        raise TargetError(f"{hpath} is not the history of {table} for consumer {consumer} (it is "
                          f"{props.get(SOURCE) or 'not pgcdc'}'s of {props.get(OWNER) or 'nobody'}); move it away, or "
                          "set target.history = false")
    if purged := [f.name for f in log.schema().fields if f.name not in NAMES and of.leaves_out(f.name)]:
        _purge(spark, hpath, purged)
        log = tablelog.read_state(spark, hpath, need_txns=False)
    have = {f.name: f.dataType for f in log.schema().fields}
    if changed := [f.name for f in data.fields if f.name in have and have[f.name] != f.dataType]:
        raise TargetError(f"{hpath}: the type of {', '.join(changed)} changed in {table}, and the history's versions "
                          "keep the old one; move the history away to start it anew (its old versions stay there)")
    if added := [f for f in data.fields if f.name not in have]:
        map_columns_if_needed(spark, hpath, log, StructType(added))
        columns = ", ".join(f"{spark_ident(f.name)} {f.dataType.simpleString()}" for f in added)
        spark.sql(f"alter table delta.{spark_ident(hpath)} add columns ({columns})")


def _purge(spark: "SparkSession", hpath: str, columns: list[str]) -> None:
    """Rewrite the history without `columns` (a column choice made later leaves them out: their
    values leave every version, not only the current ones; the history's older Delta versions
    hold them until VACUUM removes their files, as the mirror's do). Its fold mark stays: a
    Delta table keeps its txn actions across an overwrite."""
    spark.read.format("delta").load(hpath).drop(*columns).write.format("delta").mode("overwrite") \
        .option("overwriteSchema", "true").save(hpath)


def _current(spark: "SparkSession", hpath: str, data: "StructType") -> "DataFrame":
    """The history's current rows, in the mirror's data columns."""

    history = spark.read.format("delta").load(hpath).where(IS_CURRENT)
    return history.select(*columns(data, history))


def _comparable(data: "StructType") -> "Column":
    """A row's values as one comparable value (maps, which Spark cannot compare, as JSON)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    return F.struct(*[(F.to_json(F.col(spark_ident(f.name))) if isinstance(f.dataType, MapType)
                       else F.col(spark_ident(f.name))).alias(f"c{i}") for i, f in enumerate(data.fields)])


def _apply(spark: "SparkSession", hpath: str, keys: list[str], data: "StructType", states: "DataFrame",
           commits: list[Commit], newest: int, unseen: int | None) -> tuple[int, int]:
    """Turn the states into versions and merge them into the history in one commit marked with
    the mirror version `newest`: each key's first change closes its current version, each live
    change opens a version that the key's next change closes. Returns (opened, closed).
    `unseen`: the first of the mirror versions before `newest` this fold could not see one by
    one (folded as a snapshot at `newest`), which its commit's metadata names."""
    from delta.tables import DeltaTable
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, ShortType

    ks = [spark_ident(k) for k in keys]
    states = states.persist(StorageLevel.MEMORY_AND_DISK)
    # the current versions of the keys the fold saw alone (not the whole history through the
    # window); a one-column integer key also bounds the scan, so Delta skips the files outside
    current, bounds = _current(spark, hpath, data), ""
    if len(keys) == 1 and isinstance(data[keys[0]].dataType, (IntegerType, LongType, ShortType)):
        low, high = states.agg(F.min(ks[0]), F.max(ks[0])).first() or (None, None)
        if low is not None and high is not None:
            bounds = f"{ks[0]} between {int(low)} and {int(high)}"
            current = current.where(bounds)
    current = current.join(states.select(*ks).distinct(), on=keys, how="left_semi")
    base = current.withColumn("_v", F.lit(-1).cast("long")).withColumn("_live", F.lit(True))
    by_key = Window.partitionBy(*ks).orderBy("_v")
    seen = base.unionByName(states).withColumn("_cmp", _comparable(data)) \
        .withColumn("_had", F.max(F.col("_v") < 0).over(Window.partitionBy(*ks))) \
        .withColumn("_prev_live", F.coalesce(F.lag("_live").over(by_key), F.lit(False))) \
        .withColumn("_prev", F.lag("_cmp").over(by_key))
    changed = seen.where((F.col("_v") >= 0) & ((F.col("_prev_live") != F.col("_live")) |
                                                (F.col("_live") & ~F.col("_cmp").eqNullSafe(F.col("_prev")))))
    events = changed.withColumn("_next", F.lead("_v").over(by_key)) \
        .withColumn("_first", F.row_number().over(by_key) == 1).drop("_cmp", "_prev", "_prev_live") \
        .persist(StorageLevel.MEMORY_AND_DISK)
    try:
        times = spark.createDataFrame(
            [(c.version, c.millis, c.watermark) for c in commits] or [(newest, 0, None)],
            "_tv long, _millis long, _wm long").withColumn("_ts", F.timestamp_millis("_millis")).drop("_millis")
        times = F.broadcast(times)
        opens = events.where("_live").join(times, F.col("_v") == F.col("_tv")).select(
            *ks, *[spark_ident(f.name) for f in data.fields if f.name not in keys],
            F.col("_ts").alias(VALID_FROM), F.col("_v").alias(FROM_VERSION), F.col("_wm").alias(WATERMARK),
            F.col("_next").alias(TO_VERSION), F.col("_next").isNull().alias(IS_CURRENT), F.lit(False).alias("_close"))
        opens = opens.join(times.select(F.col("_tv").alias("_nv"), F.col("_ts").alias(VALID_TO)),
                           F.col(TO_VERSION) == F.col("_nv"), "left").drop("_nv")
        closes = events.where("_first and _had").join(times, F.col("_v") == F.col("_tv")).select(
            *ks, F.col("_v").alias(TO_VERSION), F.col("_ts").alias(VALID_TO), F.lit(True).alias("_close"))
        source = opens.unionByName(closes, allowMissingColumns=True)
        # Idempotent against the history as the MERGE reads it, should another fold (a fan-in's
        # other source) have folded some of these versions since this one read it: a close only
        # closes a current version older than the version closing it, and a version opened
        # already is matched (by its key and first version) and takes this fold's end instead of
        # being opened twice.
        on = " and ".join(f"t.{k} = s.{k}" for k in ks) + \
            f" and ((s._close and t.{IS_CURRENT} and t.{FROM_VERSION} < s.{TO_VERSION})" \
            f" or (not s._close and t.{FROM_VERSION} = s.{FROM_VERSION}))" + \
            (f" and t.{bounds}" if bounds else "")  # (target-only: Delta skips the files outside)
        names = [*(f.name for f in data.fields), *NAMES]
        inserted: dict[str, str | Column] = {spark_ident(n): f"s.{spark_ident(n)}" for n in names}
        merge = DeltaTable.forPath(spark, hpath).alias("t").merge(source.alias("s"), on) \
            .whenMatchedUpdate(condition="s._close", set={VALID_TO: f"s.{VALID_TO}", TO_VERSION: f"s.{TO_VERSION}",
                                                          IS_CURRENT: "false"}) \
            .whenMatchedUpdate(set={VALID_TO: f"s.{VALID_TO}", TO_VERSION: f"s.{TO_VERSION}",
                                    IS_CURRENT: f"s.{IS_CURRENT}"}) \
            .whenNotMatchedInsert(condition="not s._close", values=inserted)
        with session_confs(spark, _marked(newest, unseen)), \
                conflicts(hpath, f"the history's fold up to version {newest}"):
            merge.execute()
    finally:
        events.unpersist()
        states.unpersist()
    return _counted(spark, hpath, newest)


def _counted(spark: "SparkSession", hpath: str, newest: int) -> tuple[int, int]:
    """The versions the fold up to mirror version `newest` opened and closed, from its commit's
    metrics (no Spark job): rows inserted, and rows updated (a version another fold had opened
    already, which this one matched, counts as closed); (0, 0) if Delta skipped it (folded before)."""
    top = tablelog.latest_version(spark, hpath)
    for version in range(top, max(top - 20, -1), -1):  # (an OPTIMIZE of the history may follow it)
        actions = tablelog.commit_actions(spark, hpath, version) or []
        if any((a.get("txn") or {}).get("appId") == APP_ID for a in actions):
            if not any((a.get("txn") or {}).get("version") == newest for a in actions):
                break
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
            metrics = info.get("operationMetrics") or {}
            return int(metrics.get("numTargetRowsInserted", 0)), int(metrics.get("numTargetRowsUpdated", 0))
    return 0, 0
