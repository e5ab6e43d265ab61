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

import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pgcdc.errors import ConflictError, TargetError
from pgcdc.lake import landing, tablelog
from pgcdc.lake.history_states import Commit, Mirror, columns, commit, live, states
from pgcdc.lake.history_versions import (APP_ID, FROM_VERSION, IS_CURRENT, NAMES, TO_VERSION, VALID_FROM, VALID_TO,
                                          WATERMARK, Fold, apply, current_rows, fields, marked)
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.target import (OWNER, SOURCE, clear_unfinished_create, map_columns_if_needed,
                               needs_column_mapping, session_confs)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

SUFFIX = "__history"
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
    mirror = Mirror(spark, path, keys, data, of.soft)
    current = current_rows(spark, hpath, data)
    try:
        opened, closed = apply(Fold(hpath, mirror, commits, newest, None if done < 0 or feed else done + 1),
                                states(mirror, commits, current))
    except Exception as exc:  # a file the change data needs is gone (VACUUM): the mirror as it is now
        if not any(s in str(exc) for s in _GONE):
            raise
        commits = [replace(commit(spark, path, newest), snapshot=True)]
        opened, closed = apply(Fold(hpath, mirror, commits, newest, done + 1), states(mirror, commits, current))
    return Folded(commits[0].version, newest, opened, closed)


def _data_schema(schema: "StructType") -> "StructType":
    """The mirror's columns that enter the history (not pgcdc's own)."""
    from pyspark.sql.types import StructType

    return StructType([f for f in schema.fields if f.name not in landing.NAMES])


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
    schema = StructType([StructField(f.name, f.dataType, True) for f in data.fields] + fields())
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
        with session_confs(spark, marked(first.version, None)):
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
