"""Cuts in the lake: the record a pass leaves of the Delta version at which each of its tables
equals PostgreSQL as of the pass's snapshot (docs/readers.md), and finding the newest one that
holds the tables a reader asks for.

One small JSON file per pass, <root>/_pgcdc/cuts/<consumer>/<when>-<xmax>.json, written whole
once the pass is over (a pass killed before leaves none), the newest KEPT of them kept. The
newest is the one whose snapshot is newest (its xmax), whatever the clocks of the workers that
wrote them say. A reader needs nothing but the files: no database, no pgcdc.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pgcdc.errors import TargetError
from pgcdc.lake.paths import FOLDER, local_folder, target_root
from pgcdc.settings import Settings, load_settings
from pgcdc.spark.jvm import cls

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT = 1
KEPT = 100  # cuts kept per consumer: a reader that pinned one has ~100 passes to read it


@dataclass(frozen=True)
class CutTable:
    """One Delta table at a cut: the version to read it at, and the PostgreSQL tables it holds
    (one, or a fan-in's sources)."""

    path: str
    version: int
    sources: list[str]


@dataclass(frozen=True)
class Cut:
    """One pass's cut: its snapshot, the Delta tables that joined it (by Delta table name) and the
    tables that did not, with why."""

    consumer: str
    name: str  # the file's name without .json: when it was taken, and its snapshot's xmax
    taken_at: str  # ISO 8601, UTC
    snapshot: dict[str, Any]  # xmin, xmax and the in-progress count of the pass's snapshot
    tables: dict[str, CutTable] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)  # by PostgreSQL or Delta table name: why

    def to_json(self) -> str:
        return json.dumps({"pgcdc_cut": FORMAT} | asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Cut":
        d = json.loads(text)
        if d.pop("pgcdc_cut", None) != FORMAT:
            raise ValueError("not a pgcdc cut")
        tables = {name: CutTable(**t) for name, t in d.pop("tables").items()}
        return cls(tables=tables, **d)

    def select(self, names: list[str] | None = None) -> dict[str, CutTable]:
        """Its Delta tables (all, or those `names` name: Delta or PostgreSQL names), by name, sorted."""
        wanted = set(names or self.tables)
        return {name: t for name, t in sorted(self.tables.items()) if name in wanted or wanted & set(t.sources)}

    def holds(self, names: list[str]) -> list[str]:
        """Of `names` (Delta table names or PostgreSQL ones), those this cut does not hold."""
        held = set(self.tables) | {s for t in self.tables.values() for s in t.sources}
        return [n for n in names if n not in held]


def _folder(root: str, consumer: str) -> str:
    return f"{target_root(root)}/{FOLDER}/cuts/{consumer}"


def write(spark: "SparkSession | None", root: str, cut: Cut) -> None:
    """Write the cut's file, then drop the oldest beyond KEPT."""
    folder = _folder(root, cut.consumer)
    local = local_folder(folder)
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
        staged = local / f".{cut.name}.{uuid.uuid4().hex}.tmp"
        staged.write_text(cut.to_json(), encoding="utf-8")
        os.replace(staged, local / f"{cut.name}.json")
        for old in names(spark, root, cut.consumer)[KEPT:]:
            (local / f"{old}.json").unlink(missing_ok=True)
        return
    assert spark is not None
    fs, path = _hadoop(spark, folder)
    out = fs.create(path(f"{folder}/{cut.name}.json"), True)
    try:
        out.write(bytearray(cut.to_json().encode()))
    finally:
        out.close()
    for old in names(spark, root, cut.consumer)[KEPT:]:
        fs.delete(path(f"{folder}/{old}.json"), False)


def _hadoop(spark: "SparkSession", folder: str) -> tuple[Any, Any]:
    hadoop_path = cls(spark, "org.apache.hadoop.fs.Path")
    return hadoop_path(folder).getFileSystem(spark._jsc.hadoopConfiguration()), hadoop_path


def names(spark: "SparkSession | None", root: str, consumer: str) -> list[str]:
    """The consumer's cuts, newest first (file names without .json)."""
    folder = _folder(root, consumer)
    local = local_folder(folder)
    if local is not None:
        found = [p.name for p in local.glob("*.json")] if local.is_dir() else []
    else:
        if spark is None:
            raise TargetError(f"{folder} is remote: reading its cuts needs a Spark session")
        fs, path = _hadoop(spark, folder)
        found = [s.getPath().getName() for s in fs.listStatus(path(folder))] if fs.exists(path(folder)) else []
    return sorted((n[:-len(".json")] for n in found if n.endswith(".json") and not n.startswith(".")), key=_order,
                  reverse=True)


def _order(name: str) -> tuple[int, str]:
    """Where a cut named `<when>-<xmax>` stands among the consumer's: by its snapshot's xmax (the
    database's own order: workers' clocks may disagree), then by its time."""
    when, _, xmax = name.rpartition("-")
    return (int(xmax) if xmax.isdigit() else -1), when


def read(spark: "SparkSession | None", root: str, consumer: str, name: str) -> Cut:
    """One cut, by name."""
    file = f"{_folder(root, consumer)}/{name}.json"
    local = local_folder(file)
    if local is not None:
        return Cut.from_json(local.read_text(encoding="utf-8"))
    assert spark is not None
    fs, path = _hadoop(spark, file)
    stream = fs.open(path(file))
    try:
        return Cut.from_json(cls(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8"))
    finally:
        stream.close()


def newest(spark: "SparkSession | None", root: str, consumer: str, wanted: list[str] | None = None) -> Cut:
    """The newest cut holding every table of `wanted` (Delta or PostgreSQL names; None: every
    table of the newest pass, those left out of it included). TargetError naming each table that no
    kept cut holds, with why the newest pass left it out."""
    listed = names(spark, root, consumer)
    if not listed:
        raise TargetError(f"consumer {consumer} has no cut under {target_root(root)} yet: a pass in out_of_order "
                          "mode with ingest.cuts on (the default) records one; run `pgcdc ingest`")
    latest = read(spark, root, consumer, listed[0])
    want = wanted if wanted else sorted(set(latest.tables) | set(latest.left_out))
    for name in listed:
        cut = latest if name == listed[0] else read(spark, root, consumer, name)
        if not cut.holds(want):
            return cut
    missing = latest.holds(want)
    reasons = "; ".join(f"{n}: {latest.left_out.get(n, 'not a table of the consumer')}" for n in missing)
    raise TargetError(f"no cut of consumer {consumer} (of the newest {len(listed)}) holds {', '.join(missing)} "
                      f"({reasons}); run `pgcdc ingest` again once that is fixed, or ask for fewer tables")


def read_tables(spark: "SparkSession", cut: Cut, names: list[str] | None = None) -> dict[str, "DataFrame"]:
    """The cut's Delta tables (all, or those `names` hold: Delta or PostgreSQL names) as DataFrames,
    each read at its version (Delta's public reader, `versionAsOf`), by Delta table name."""
    return {name: spark.read.format("delta").option("versionAsOf", t.version).load(t.path)
            for name, t in cut.select(names).items()}


def read_cut(spark: "SparkSession", config: "Settings | str | None" = None,
             tables: list[str] | None = None) -> dict[str, "DataFrame"]:
    """The consumer's Delta tables as of its newest cut (docs/readers.md; `pgcdc.read_cut`): those
    `tables` name (Delta or PostgreSQL names; default: all of them), each read at the version at
    which they all agree with PostgreSQL as of one snapshot, by Delta table name. `config`: the
    settings or the path of their TOML file (default: $PGCDC_CONFIG)."""
    settings = config if isinstance(config, Settings) else load_settings(config)
    return read_tables(spark, newest(spark, settings.target.root, settings.consumer, tables), tables)
