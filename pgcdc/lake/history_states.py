"""What the mirror's log says the history must fold (lake/history.py): each folded commit's time
and watermark, and each key's state in each commit that touched it, from the change data feed
or, for a commit that changed the schema (or whose change data is gone), the mirror as of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgcdc.lake import landing, tablelog
from pgcdc.lake.paths import spark_ident
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class Commit:
    """A mirror commit as the history takes it."""

    version: int
    millis: int
    watermark: int | None
    snapshot: bool  # folded as a snapshot (it changed the schema, or the feed cannot serve it)


def commit(spark: "SparkSession", path: str, version: int) -> Commit:
    """What the history takes from mirror commit `version`: its time, watermark and whether it
    changed the schema (or is gone from the log: then folded as a snapshot too)."""
    actions = tablelog.commit_actions(spark, path, version)
    if actions is None:
        return Commit(version, 0, None, True)
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
    millis = int(info.get("inCommitTimestamp") or info.get("timestamp") or 0)
    meta = info.get("userMetadata")
    watermark = None
    if meta:
        try:
            state = ConsumerState.from_json(meta)
            watermark = state.watermark if state is not None else None
        except (ValueError, KeyError, TypeError):  # (another writer's metadata)
            watermark = None
    return Commit(version, millis, watermark, any("metaData" in a for a in actions))


@dataclass(frozen=True)
class Mirror:
    """The mirror a history folds: its table's path, key columns and data columns (not pgcdc's
    own), and whether its rows marked deleted count as gone (`soft`)."""

    spark: "SparkSession"
    path: str
    keys: list[str]
    data: "StructType"
    soft: bool


def states(mirror: Mirror, commits: list[Commit], current: "DataFrame") -> "DataFrame":
    """Each key's state in each folded commit that touched it: (keys, data columns, _v, _live).
    Change data for runs of plain commits; the mirror as of a snapshot commit, with the keys it
    lacks gone: those of the history's `current` rows and those the fold's earlier commits
    touched (a key an earlier commit of this fold opened is closed by the snapshot too)."""
    frames: list[DataFrame] = []
    run: list[Commit] = []
    keys = mirror.keys

    def flush() -> None:
        if run:
            frames.append(_changes(mirror, run[0].version, run[-1].version))
            run.clear()
    for c in commits:
        if c.snapshot:
            flush()
            known = current.select(*[spark_ident(k) for k in keys])
            for f in frames:
                known = known.unionByName(f.select(*[spark_ident(k) for k in keys]))
            frames.append(_snapshot(mirror, c.version, known))
        else:
            run.append(c)
    flush()
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def columns(data: "StructType", frame: "DataFrame") -> "list[Column]":
    """`data`'s columns from `frame` (null where it lacks one: a version before it was added)."""
    from pyspark.sql import functions as F

    have = set(frame.columns)
    return [(F.col(spark_ident(f.name)).cast(f.dataType) if f.name in have else F.lit(None).cast(f.dataType))
            .alias(f.name) for f in data.fields]


def live(soft: bool, frame: "DataFrame") -> "Column":
    from pyspark.sql import functions as F

    return ~landing.marked_deleted(frame) if soft else F.lit(True)


def _changes(mirror: Mirror, first: int, last: int) -> "DataFrame":
    """Keys' states from the mirror's change data feed, versions `first`-`last`: a key with an
    inserted or post-update row in a commit is live with its values, else gone."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark, keys, data = mirror.spark, mirror.keys, mirror.data
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", first) \
        .option("endingVersion", last).load(mirror.path).where("_change_type != 'update_preimage'")
    alive = F.when(F.col("_change_type") == "delete", F.lit(False)).otherwise(live(mirror.soft, feed))
    rows = feed.select(*columns(data, feed), F.col("_commit_version").alias("_v"), alive.alias("_live"))
    first_row = Window.partitionBy(*[spark_ident(k) for k in keys], "_v").orderBy(F.col("_live").desc())
    return rows.withColumn("_n", F.row_number().over(first_row)).where("_n = 1").drop("_n")


def _snapshot(mirror: Mirror, version: int, known: "DataFrame") -> "DataFrame":
    """Keys' states as of mirror `version`: its rows, and the `known` keys it lacks, gone."""
    from pyspark.sql import functions as F

    keys, data = mirror.keys, mirror.data
    then = mirror.spark.read.format("delta").option("versionAsOf", version).load(mirror.path)
    rows = then.select(*columns(data, then), F.lit(version).cast("long").alias("_v"), live(mirror.soft, then).alias("_live"))
    gone = known.distinct().join(rows.select(*[spark_ident(k) for k in keys]), on=keys, how="left_anti")
    gone = gone.select(*[F.col(spark_ident(k)) for k in keys],
                       *[F.lit(None).cast(f.dataType).alias(f.name) for f in data.fields if f.name not in keys]) \
        .withColumn("_v", F.lit(version).cast("long")).withColumn("_live", F.lit(False))
    return rows.unionByName(gone)
