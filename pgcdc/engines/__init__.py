"""Apply engines: how one batch lands in its Delta table, in one commit with the consumer state.

- merge (engines/merge.py): Delta's public `DeltaTable.merge`; runs on any Delta build,
  writes the change data feed and keeps row ids where the table has them.
- fast (engines/fast/): deletion vectors over the old rows plus new files, committed
  through Delta's internal API; faster, and only where it was proven to write what Delta
  would (engines/fast/__init__.py, `unfit`).

`choose` alone decides which engine applies a table, and says why. Both engines share
the rest: the whole-table copy (lake/copy_writes.overwrite; the fast engine writes a small table's copy
itself, `Engine.copy`) and the committed state read from the table's log as files (tablelog).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgcdc.engines import fast, merge
from pgcdc.engines.work import BatchWork, CopyWork, Engine
from pgcdc.errors import ConfigError, TargetError
from pgcdc.lake import tablelog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BatchWork", "Choice", "Chooser", "CopyWork", "Engine", "delta_version"]


@dataclass(frozen=True)
class Choice:
    engine: Engine
    why: str

    def line(self) -> str:
        return f"engine {self.engine.name}: {self.why}"


def delta_version(spark: "SparkSession") -> str:
    """The version of the Delta Lake the Spark session runs (its JVM side, which on a cluster
    need not be the Python package's)."""
    try:
        jvm: Any = spark._jvm
        return str(jvm.io.delta.package.VERSION())
    except Exception:  # (a build without the constant: the Python package's version)
        from importlib.metadata import version

        return version("delta-spark")


class Chooser:
    """Picks the engine for each table of a run (`ingest.engine`), after checking once, at
    start-up, that the running Delta build allows the configured one. `feed_for_history`: the
    change data feed is on for the history alone (`target.history` without
    `target.change_data_feed`), which the fast engine's commits serve (fast.unfit)."""

    def __init__(self, spark: "SparkSession", wanted: str, feed_for_history: bool = False) -> None:
        self.spark, self.wanted, self.feed_for_history = spark, wanted, feed_for_history
        self.version = delta_version(spark)
        self.untested = fast.untested(self.version)
        if wanted == "fast" and self.untested is not None:
            raise ConfigError(f"ingest.engine = \"fast\" refused: {self.untested}; set ingest.engine = \"merge\" "
                              "(or \"auto\")")

    def choose(self, path: str) -> Choice:
        """The engine for the table at `path`, and why."""
        if self.wanted == "merge":
            return Choice(merge.ENGINE, "as configured (ingest.engine)")
        unfit = self.untested or fast.unfit(path, tablelog.read_state(self.spark, path, need_txns=False),
                                            self.feed_for_history)
        if self.wanted == "fast":
            if unfit is not None:
                raise TargetError(f"ingest.engine = \"fast\" cannot apply {path}: {unfit}; set ingest.engine = "
                                  "\"merge\" (or \"auto\")")
            return Choice(fast.ENGINE, "as configured (ingest.engine)")
        if unfit is not None:
            return Choice(merge.ENGINE, unfit)
        return Choice(fast.ENGINE, f"local table, Delta {self.version} (tested), no table feature it leaves to merge")
