"""The last whole comparison of a table with PostgreSQL (`pgcdc verify` with a consumer): when,
at which Delta version, whether they were equal, and the key ranges that differed. Kept beside
the Delta table (lake/side_files.py, `<consumer>.verified.json`), so `pgcdc repair` soon after
compares again only those ranges instead of the whole table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pgcdc.lake import side_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Verified:
    """One whole comparison's outcome: `ranges` is diff/rows.py's Ranges, encoded (None: too
    many ranges differed to keep)."""

    at: datetime
    version: int
    equal: bool
    differing: int  # rows that differed (not counting those on their way)
    ranges: dict[str, Any] | None

    def age(self) -> float:
        """Seconds since the comparison."""
        return (datetime.now(timezone.utc) - self.at).total_seconds()


def _name(key: str) -> str:
    return f"{key}.verified.json"


def record(spark: "SparkSession", path: str, key: str, found: Verified) -> None:
    """Keep `found` as the table's last comparison for state key `key`."""
    side_files.write_text(spark, path, _name(key), json.dumps(
        {"at": found.at.isoformat(), "version": found.version, "equal": found.equal, "differing": found.differing,
         "ranges": found.ranges}))


def last(spark: "SparkSession | None", path: str, key: str) -> Verified | None:
    """The table's last comparison kept for state key `key`, or None (without `spark`: of a table
    in a local folder alone)."""
    text = side_files.read_text(spark, path, _name(key))
    try:
        d = json.loads(text) if text else None
        return None if d is None else Verified(datetime.fromisoformat(d["at"]), int(d["version"]), bool(d["equal"]),
                                               int(d["differing"]), d.get("ranges"))
    except (ValueError, KeyError, TypeError):
        return None


def forget(spark: "SparkSession", path: str, key: str) -> None:
    """Drop the kept comparison (its ranges were repaired)."""
    side_files.remove(spark, path, _name(key))
