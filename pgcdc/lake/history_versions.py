"""A history's row versions (lake/history.py): their columns, and one fold turning the keys'
states (lake/history_states.py) into versions merged into the history in one commit, marked
with the mirror version it reached."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgcdc.lake import tablelog
from pgcdc.lake.history_states import Commit, Mirror, columns
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.target import conflicts, session_confs

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

APP_ID = "pgcdc:history"
VALID_FROM = "_pgcdc_valid_from"
VALID_TO = "_pgcdc_valid_to"
IS_CURRENT = "_pgcdc_is_current"
FROM_VERSION = "_pgcdc_from_version"
TO_VERSION = "_pgcdc_to_version"
WATERMARK = "_pgcdc_watermark"
NAMES = (VALID_FROM, VALID_TO, IS_CURRENT, FROM_VERSION, TO_VERSION, WATERMARK)


def fields() -> "list[Any]":
    from pyspark.sql.types import BooleanType, LongType, StructField, TimestampType

    return [StructField(VALID_FROM, TimestampType()), StructField(VALID_TO, TimestampType()),
            StructField(IS_CURRENT, BooleanType()), StructField(FROM_VERSION, LongType()),
            StructField(TO_VERSION, LongType()), StructField(WATERMARK, LongType())]


def marked(newest: int, unseen: int | None) -> dict[str, str]:
    """The session confs that mark a history commit as the fold up to mirror version `newest`
    (its txn action; its metadata also names the versions from `unseen` it could not see)."""
    meta = {"mirror_version": newest} | ({"unseen_versions": [unseen, newest - 1]}
                                         if unseen is not None and unseen < newest else {})
    return {"spark.databricks.delta.write.txnAppId": APP_ID, "spark.databricks.delta.write.txnVersion": str(newest),
            "spark.databricks.delta.commitInfo.userMetadata": json.dumps(meta)}


def current_rows(spark: "SparkSession", hpath: str, data: "StructType") -> "DataFrame":
    """The history's current rows, in the mirror's data columns."""

    history = spark.read.format("delta").load(hpath).where(IS_CURRENT)
    return history.select(*columns(data, history))


def _comparable(data: "StructType") -> "Column":
    """A row's values as one comparable value (maps, which Spark cannot compare, as JSON)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    return F.struct(*[(F.to_json(F.col(spark_ident(f.name))) if isinstance(f.dataType, MapType)
                       else F.col(spark_ident(f.name))).alias(f"c{i}") for i, f in enumerate(data.fields)])


@dataclass(frozen=True)
class Fold:
    """One fold: into the history at `hpath`, of the mirror's `commits`, marked with the mirror
    version `newest`; `unseen`: the first of the mirror versions before `newest` it could not see
    one by one (folded as a snapshot at `newest`), which its commit's metadata names."""

    hpath: str
    mirror: Mirror
    commits: list[Commit]
    newest: int
    unseen: int | None


def apply(fold: Fold, states: "DataFrame") -> tuple[int, int]:
    """Turn the states into versions and merge them into the history in one commit: each key's
    first change closes its current version, each live change opens a version that the key's next
    change closes. Returns (opened, closed)."""
    from pyspark import StorageLevel

    states = states.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        bounds = _bounds(fold.mirror, states)
        events = _events(fold, states, bounds).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            _merge(fold, events, bounds)
        finally:
            events.unpersist()
    finally:
        states.unpersist()
    return counted(fold.mirror.spark, fold.hpath, fold.newest)


def _bounds(mirror: Mirror, states: "DataFrame") -> str:
    """A filter on a one-column integer key's range over the keys the fold saw ("" for other
    keys): the history's reads and its MERGE's target skip the files outside."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, ShortType

    keys = mirror.keys
    if len(keys) != 1 or not isinstance(mirror.data[keys[0]].dataType, (IntegerType, LongType, ShortType)):
        return ""
    k = spark_ident(keys[0])
    low, high = states.agg(F.min(k), F.max(k)).first() or (None, None)
    return "" if low is None or high is None else f"{k} between {int(low)} and {int(high)}"


def _events(fold: Fold, states: "DataFrame", bounds: str) -> "DataFrame":
    """Each key's changes in order (a state equal to the one before it is no change), beside the
    version of its next change (`_next`), whether it is the key's first (`_first`) and whether
    the key had a current version (`_had`): the current versions of the keys the fold saw alone,
    not the whole history through the window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    mirror = fold.mirror
    ks = [spark_ident(k) for k in mirror.keys]
    current = current_rows(mirror.spark, fold.hpath, mirror.data)
    if bounds:
        current = current.where(bounds)
    current = current.join(states.select(*ks).distinct(), on=mirror.keys, how="left_semi")
    base = current.withColumn("_v", F.lit(-1).cast("long")).withColumn("_live", F.lit(True))
    by_key = Window.partitionBy(*ks).orderBy("_v")
    seen = base.unionByName(states).withColumn("_cmp", _comparable(mirror.data)) \
        .withColumn("_had", F.max(F.col("_v") < 0).over(Window.partitionBy(*ks))) \
        .withColumn("_prev_live", F.coalesce(F.lag("_live").over(by_key), F.lit(False))) \
        .withColumn("_prev", F.lag("_cmp").over(by_key))
    changed = seen.where((F.col("_v") >= 0) & ((F.col("_prev_live") != F.col("_live")) |
                                                (F.col("_live") & ~F.col("_cmp").eqNullSafe(F.col("_prev")))))
    return changed.withColumn("_next", F.lead("_v").over(by_key)) \
        .withColumn("_first", F.row_number().over(by_key) == 1).drop("_cmp", "_prev", "_prev_live")


def _merge(fold: Fold, events: "DataFrame", bounds: str) -> None:
    """MERGE the versions the events open and close into the history, in one commit marked with
    the fold's newest mirror version."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    spark, data, keys = fold.mirror.spark, fold.mirror.data, fold.mirror.keys
    ks = [spark_ident(k) for k in keys]
    times = spark.createDataFrame(
        [(c.version, c.millis, c.watermark) for c in fold.commits] or [(fold.newest, 0, None)],
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
    merge = DeltaTable.forPath(spark, fold.hpath).alias("t").merge(source.alias("s"), on) \
        .whenMatchedUpdate(condition="s._close", set={VALID_TO: f"s.{VALID_TO}", TO_VERSION: f"s.{TO_VERSION}",
                                                      IS_CURRENT: "false"}) \
        .whenMatchedUpdate(set={VALID_TO: f"s.{VALID_TO}", TO_VERSION: f"s.{TO_VERSION}",
                                IS_CURRENT: f"s.{IS_CURRENT}"}) \
        .whenNotMatchedInsert(condition="not s._close", values=inserted)
    with session_confs(spark, marked(fold.newest, fold.unseen)), \
            conflicts(fold.hpath, f"the history's fold up to version {fold.newest}"):
        merge.execute()


def counted(spark: "SparkSession", hpath: str, newest: int) -> tuple[int, int]:
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
