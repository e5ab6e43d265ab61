"""A table's column changes applied to its Delta table in place, without reading PostgreSQL's rows.

A Delta table records which PostgreSQL column each of its columns holds (the table property
`pgcdc.columns`: name -> attnum): a column renamed keeps its number, one dropped and added again
gets a new one. Planned from the Delta table's columns, the source's (as the sync reads them,
with their numbers) and what PostgreSQL's catalog says an added column holds in rows that
existed before it (source/added.py):

- a column added with no default: NULL in every existing row, as in PostgreSQL (a metadata-only
  ADD COLUMNS);
- a column added with a default PostgreSQL stored without rewriting the table (atthasmissing):
  that value in every existing row (a row marked deleted, `[target] deletes = "soft"`, keeps
  NULL there: it was gone before the column came, and holds its last synced values);
- dropped or renamed, in a table over 64 MiB (`by_mapping`, `[target] column_mapping`): ALTER
  TABLE DROP/RENAME COLUMN under Delta's column mapping (metadata alone; turned on first);
- dropped or renamed in a smaller table, widened without loss (smallint -> int -> bigint, real ->
  double, numeric to more digits on both sides of the point): the Delta table rewritten from
  itself in one commit (its columns selected, renamed, cast), readable by every Delta reader, no
  table feature added.

Anything else (a column PostgreSQL holds a value for that the catalog does not say, a retype that
could change a value, a table whose columns' numbers were never recorded) is copied, for the
reason `plan` gives. Rows changed since the change are read again by the batches, whose reads
fail while the columns are not the ones the run checked (source/columns.py `unchanged`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgcdc.lake import landing
from pgcdc.lake.paths import spark_ident
from pgcdc.lake.target import COLUMNS, map_columns, map_columns_if_needed, maps_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

    from pgcdc.lake.tablelog import LogState

_UNKNOWN, _MOVED = object(), object()


@dataclass(frozen=True)
class Target:
    """One column of the evolved table: its name and type, and the Delta column it comes from
    (`source`, of type `was`) or, for one added, the value existing rows hold (`value`)."""

    name: str
    dtype: "DataType"
    source: str | None = None
    was: "DataType | None" = None
    value: Any = None


@dataclass
class Evolution:
    """How a Delta table's columns become the source's: `columns` in order, those `dropped`,
    the numbers to record (`ids`) and what it says of the change (`said`)."""

    columns: list[Target] = field(default_factory=list)
    widened: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)

    @property
    def metadata_only(self) -> bool:
        """Only columns added that hold NULL in existing rows, the others as they were and in
        their order: ALTER TABLE ADD COLUMNS does it without writing a data file."""
        kept = [c for c in self.columns if c.source is not None]
        return not self.dropped and all(c.value is None for c in self.columns if c.source is None) \
            and all(c.source == c.name and c.was == c.dtype for c in kept)

    @property
    def renames_and_drops(self) -> bool:
        """Only columns dropped and renamed (and added holding NULL), none widened or filled, the
        others in their order: with column mapping, ALTER TABLE does each without a data file."""
        kept = [c for c in self.columns if c.source is not None]
        renamed = {c.source: c.name for c in kept if c.source != c.name}
        return bool(self.dropped or renamed) and all(c.was == c.dtype for c in kept) \
            and all(c.value is None for c in self.columns if c.source is None) \
            and not set(renamed.values()) & {c.source for c in kept}  # (no swap of names)

    def line(self) -> str:
        return "; ".join(self.said)


MAPPING_BYTES = 64 * 1024 * 1024  # a Delta table over this turns column mapping on for a drop or rename


def by_mapping(log: "LogState", evo: Evolution, setting: str) -> bool:
    """Whether `evo` goes by column mapping (metadata alone) rather than a rewrite of the table
    from itself: only drops and renames, on a table that maps columns already, or (`setting`,
    [target] column_mapping) any table ("always"), one over MAPPING_BYTES ("auto"), for which a rewrite would cost
    seconds (~7 s for 20M narrow rows here) where metadata costs a fraction of one. A smaller
    table is rewritten: it stays readable by readers without column mapping."""
    if not evo.renames_and_drops:
        return False
    return maps_columns(log) or setting == "always" or (setting == "auto" and (log.table_bytes or 0) > MAPPING_BYTES)


def recorded(log: "LogState") -> dict[str, int] | None:
    """The Delta table's record of which PostgreSQL column each of its columns is, or None."""
    text = log.configuration.get(COLUMNS)
    return None if not text else {str(k): int(v) for k, v in json.loads(text).items()}


def plan(delta: "StructType", source: "StructType", attnums: dict[str, int], ids: dict[str, int] | None,
         added: dict[int, tuple[bool, Any]], own: set[str]) -> Evolution | str:
    """How to bring `delta`'s columns to `source`'s (as the sync reads them: PostgreSQL's,
    numbered by `attnums`, and pgcdc's own, named in `own`), or why the table must be copied.
    `ids`: the Delta table's record (None: never recorded, then names decide, and only columns
    added or widened go in place); `added`: for each added column (by number), whether the
    catalog knows what existing rows hold in it, and that value (None: NULL).
    (Six parameters: the two schemas and the four facts about them, each from another place.)"""
    have = {f.name: f for f in delta.fields}
    by_id = {} if ids is None else {n: i for n, i in ids.items() if n in have}
    evo = Evolution(ids={n: attnums[n] for n in attnums})
    used: set[str] = set()
    for f in source.fields:
        if f.name in own:
            if f.name not in have or have[f.name].dataType != f.dataType:
                return f"pgcdc's column {f.name} changed"
            evo.columns.append(Target(f.name, f.dataType, f.name, f.dataType))
            used.add(f.name)
            continue
        old = _match(f.name, attnums[f.name], have, by_id, ids)
        if old is _UNKNOWN:
            return (f"its Delta table does not record which PostgreSQL column {f.name} was (written before pgcdc "
                    "recorded column numbers)")
        if old is _MOVED:
            return f"column {f.name} is not in its Delta table as pgcdc left it (another writer changed the table)"
        if old is None:
            known, value = added.get(attnums[f.name], (False, None))
            if not known:
                return (f"column {f.name} was added with a default whose value in older rows PostgreSQL no longer "
                        "keeps apart from them (the table was rewritten since, or the default set later)")
            evo.columns.append(Target(f.name, f.dataType, value=value))
            evo.said.append(f"added {f.name}" + ("" if value is None else f" (existing rows: {value!r})"))
            continue
        assert isinstance(old, str)
        used.add(old)
        was = have[old].dataType
        if was != f.dataType and not widens(was, f.dataType):
            return f"column {f.name} retyped {was.simpleString()} -> {f.dataType.simpleString()}, which may change values"
        evo.columns.append(Target(f.name, f.dataType, old, was))
        if old != f.name:
            evo.said.append(f"renamed {old} -> {f.name}")
        if was != f.dataType:
            evo.widened.append(f.name)
            evo.said.append(f"widened {f.name} {was.simpleString()} -> {f.dataType.simpleString()}")
    for name in have:
        if name not in used:
            if name in landing.NAMES:  # (what lands beside the rows changed: soft deletes off, say)
                return f"pgcdc's column {name} is no longer asked for"
            if ids is not None and name not in ids:
                return f"its Delta table's column {name} is not one pgcdc recorded (another writer changed the table)"
            if ids is None:
                return f"column {name} is gone, and its Delta table does not record the columns' numbers"
            evo.dropped.append(name)
            evo.said.append(f"dropped {name}")
    return evo


def _match(name: str, attnum: int, have: dict[str, "StructField"], by_id: dict[str, int],
           ids: dict[str, int] | None) -> str | None | object:
    """The Delta column holding PostgreSQL column `name` (number `attnum`), None if none does
    (it was added: PostgreSQL numbers a new column above every number it gave before), _UNKNOWN
    where only a record could tell, or _MOVED where the record says the Delta table had it and
    it no longer does (another writer renamed or dropped it)."""
    if ids is None:
        return name if name in have else None
    found = [n for n, i in by_id.items() if i == attnum]
    if found:
        return found[0]
    if attnum <= max(ids.values(), default=0):
        return _MOVED
    return _UNKNOWN if name in have and name not in by_id else None


def widens(was: "DataType", now: "DataType") -> bool:
    """True if every value of `was` is a value of `now` (Spark's types, as the sync reads them)."""
    from pyspark.sql.types import (ByteType, DecimalType, DoubleType, FloatType, IntegerType, LongType,
                                   ShortType)

    ints: list[type] = [ByteType, ShortType, IntegerType, LongType]
    if type(was) in ints and type(now) in ints:
        return ints.index(type(was)) <= ints.index(type(now))
    if isinstance(was, FloatType) and isinstance(now, DoubleType):
        return True
    if isinstance(was, DecimalType) and isinstance(now, DecimalType):
        return now.scale >= was.scale and now.precision - now.scale >= was.precision - was.scale
    return False


def apply(spark: "SparkSession", path: str, log: "LogState", evo: Evolution, mapping: bool = False) -> None:
    """Change the Delta table at `path` (of `log`) as `evo` says, then record its columns' numbers:
    added columns that hold NULL by ALTER TABLE ADD COLUMNS (metadata), drops and renames with
    `mapping` (by_mapping) by ALTER TABLE under column mapping (turned on first: metadata),
    anything else by one overwrite of the table from itself. A kill between the commits leaves
    the record of the old columns, whose numbers still hold for every column both have (the next
    run compares again, and finds the columns changed so far)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    table = f"delta.{spark_ident(path)}"
    map_columns_if_needed(spark, path, log, StructType([StructField(c.name, c.dtype) for c in evo.columns]))
    if mapping:
        map_columns(spark, path, log)
        if evo.dropped:  # (first: a column may be renamed to a dropped one's name)
            spark.sql(f"alter table {table} drop columns ({', '.join(spark_ident(n) for n in evo.dropped)})")
        for c in evo.columns:
            if c.source is not None and c.source != c.name:
                spark.sql(f"alter table {table} rename column {spark_ident(c.source)} to {spark_ident(c.name)}")
    if evo.metadata_only or mapping:
        after: str | None = None
        for c in evo.columns:
            if c.source is None:
                spark.sql(f"alter table {table} add columns ({spark_ident(c.name)} "
                          f"{c.dtype.simpleString()}{' after ' + spark_ident(after) if after else ' first'})")
            after = c.name
    else:
        rows = spark.read.format("delta").load(path)
        gone = landing.marked_deleted(rows)
        exprs = [F.col(spark_ident(c.source)).cast(c.dtype).alias(c.name) if c.source is not None else
                 F.when(gone, F.lit(None)).otherwise(F.lit(c.value)).cast(c.dtype).alias(c.name)
                 for c in evo.columns]
        parts = list(log.metadata.get("partitionColumns") or [])
        writer = rows.select(*exprs).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        (writer.partitionBy(*parts) if parts else writer).save(path)
    _set_ids(spark, path, evo.ids)


def record(spark: "SparkSession", path: str, log: "LogState", ids: dict[str, int]) -> None:
    """Record the columns' numbers of a Delta table (of `log`) just written with the source's
    columns (a metadata commit, where they differ from those recorded)."""
    if recorded(log) != ids:
        _set_ids(spark, path, ids)


def _set_ids(spark: "SparkSession", path: str, ids: dict[str, int]) -> None:
    spark.sql(f"alter table delta.{spark_ident(path)} set tblproperties ('{COLUMNS}' = {_string(json.dumps(ids))})")


def _string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
