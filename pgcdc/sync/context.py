"""What a run's steps share. The Job (sync/ingest.py) owns one RunContext and hands it to each
step it calls (copies, chunked copies, history folds, idle tables, progress): a step receives
what it needs and never the Job, so no step calls back into it and the imports only go down.

It holds the settings, the Spark session, what lands beside the columns, the compactor, the
sources' Spark schemas kept between a follower's runs, how a run speaks (log lines; a
follower's routine lines at DEBUG), whether it was asked to stop, and what a Delta commit
of a table's rows is followed by (`committed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pgcdc import faults
from pgcdc.errors import TargetError
from pgcdc.lake import tablelog, verified
from pgcdc.lake.landing import Landing
from pgcdc.lake.state import write_state_file
from pgcdc.log import fields
from pgcdc.records import Record
from pgcdc.settings import Settings
from pgcdc.source import enrich
from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column, fingerprint
from pgcdc.source.mirror import mirror_state
from pgcdc.sync.compact import Compactor
from pgcdc.watermark import ConsumerState, state_key

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from pgcdc.source.sessions import RunSource
    from pgcdc.lake.target import Written
    from pgcdc.sync.pass_cut import PassCut
    from pgcdc.sync.report import TableReport

_log = logging.getLogger("pgcdc.sync.ingest")  # (the Job's lines; each step passes its own logger)


@dataclass
class TableWork:
    """One table's turn in a run: its connections (primary, reader, JDBC options), the
    database's identity, the table, its columns as the reader reads them, its Delta table's
    path and the report of what the run did to it. The steps of its sync take it whole."""

    primary: "psycopg.Connection"
    reader: "psycopg.Connection"
    jdbc: dict[str, str]
    identity: str
    t: AttachedTable
    columns: list[Column]
    path: str
    report: "TableReport"

    @staticmethod
    def of(src: "RunSource", t: AttachedTable, columns: list[Column], path: str, report: "TableReport") -> "TableWork":
        return TableWork(src.primary, src.reader, src.jdbc, src.identity, t, columns, path, report)


class RunContext:
    """One run's (or a follower's runs') shared parts; see the module docstring."""

    def __init__(self, settings: Settings, spark: "SparkSession", say: Callable[[str], None] | None,
                 following: bool) -> None:
        self.settings = settings
        self.spark = spark
        self.sink = say  # (tests keep every INFO line)
        self.following = following
        self.landing = Landing.of(settings.target)  # what lands beside the source's columns
        self.compactor = Compactor(spark, settings.spark.conf)  # small files, beside the run
        self.cut: "PassCut | None" = None  # the pass's cut (sync/pass_cut.py), shared with its lanes
        self.stopping: Callable[[], bool] = lambda: False  # a stop request (a signal), seen between batches
        self.on_copy: Callable[[str, float, float | None], None] | None = None  # (table, done 0-1, seconds left)
        self.schemas: dict[int, tuple[object, "StructType"]] = {}  # by table id: its columns and their Spark schema

    def say(self, message: str, level: int = logging.INFO, record: Record | None = None,
            log: logging.Logger = _log) -> None:
        """Log one line (with its machine-readable `record` for the JSON format) under `log`, the
        logger of the module that says it."""
        log.log(level, message, extra=fields(record))
        if self.sink is not None and level >= logging.INFO:
            self.sink(message)

    def routine(self, message: str) -> None:
        """A line a follower repeats every run: DEBUG there, INFO in a single run."""
        self.say(message, logging.DEBUG if self.following else logging.INFO)

    def key(self, t: AttachedTable) -> str:
        """What the consumer's state of table `t` goes by in its Delta table (lake/state.py)."""
        return state_key(self.settings.consumer, t.fan_in_shard)

    def fingerprint(self, t: AttachedTable, columns: list[Column]) -> str:
        """What the table's state keeps of the columns its Delta table was checked against: its
        name, key and columns and what lands beside them, so that a table whose columns or
        landing changed takes the full path (sync/idle.py), which copies it again."""
        return fingerprint(t.name, t.key_columns, columns, self.landing.shape())

    def source_schema(self, jdbc: dict[str, str], t: AttachedTable, columns: list[Column]) -> "StructType":
        """The table's Spark schema as the sync reads it (enrich.schema_of, a JDBC connection and
        query: ~40 ms, in every run of every table), kept for later runs (a follower's) while the
        table's columns, read anew each run, stay what they were."""
        key = (t.name, tuple(t.key_columns), tuple(columns))
        kept = self.schemas.get(t.table_id)
        if kept is None or kept[0] != key:
            kept = self.schemas[t.table_id] = (key, enrich.schema_of(self.spark, jdbc, t, columns))
        return kept[1]

    def target_schema(self, jdbc: dict[str, str], t: AttachedTable, columns: list[Column]) -> "StructType":
        """The columns of the table's Delta table: the source's as the sync reads them, and
        pgcdc's own (lake/landing.py)."""
        return self.landing.schema(self.source_schema(jdbc, t, columns))

    def committed(self, primary: "psycopg.Connection", path: str, state: ConsumerState, written: "Written",
                  copied: bool = False) -> ConsumerState:
        """After a Delta commit: check that the files it added are there (an outside VACUUM with its
        retention check off deletes a batch's files before they are committed), then copy the
        state, with the version that holds it, next to the table and into PostgreSQL; return it."""
        faults.failpoint("after-commit")
        gone = tablelog.added_missing(self.spark, path, written.version)
        if gone:
            raise TargetError(f"{path}: data files that batch {state.batch} of {state.table} just committed are gone "
                              f"({', '.join(gone)}, ...): something deleted them while the batch was written (a VACUUM "
                              f"with its retention check off?); the table cannot be read until `pgcdc resync "
                              f"{state.table}` writes it again")
        state = replace(state, version=written.version)
        write_state_file(self.spark, path, state)
        faults.failpoint("after-state-file")
        mirror_state(primary, state, path, copied)
        if copied:  # (rows a verify or watch found different were written again)
            verified.forget(self.spark, path, state.key)
        return state
