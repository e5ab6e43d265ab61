"""The machine-readable log records pgcdc writes (`--log-format json`, docs/operations.md), as a
small typed set: each a frozen dataclass whose kind is the record's `record` field and whose
fields are the rest of its JSON object. One place lists what a log shipper can rely on; a record
is made by its class, never spelled as loose keywords. `pgcdc.log.fields(record)` turns one into
a logging call's `extra=`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Record:
    """A record's kind (`KIND`) and fields."""

    KIND: ClassVar[str] = ""

    def fields(self) -> dict[str, Any]:
        return {"record": self.KIND} | asdict(self)


@dataclass(frozen=True)
class Batch(Record):
    """One batch applied to a table (sync/apply.py)."""

    KIND: ClassVar[str] = "batch"
    table: str
    batch: int
    engine: str
    events: int
    keys: int
    upserted: int
    deleted: int
    watermark: int
    seconds: float


@dataclass(frozen=True)
class Partitions(Record):
    """Partitions truncated or dropped: their rows replaced in a table (sync/partition_step.py);
    `found`: the rows PostgreSQL holds in their bounds now."""

    KIND: ClassVar[str] = "partitions"
    table: str
    batch: int
    partitions: list[str]
    found: int
    seconds: float


@dataclass(frozen=True)
class TableDone(Record):
    """What a run did to one table (sync/report.py TableReport, its fields as they are)."""

    KIND: ClassVar[str] = "table"
    table: str
    path: str
    batches: int
    events: int
    upserted: int
    deleted: int
    copied: int | None
    reconciled: int | None
    watermark: int
    pending_events: int
    oldest_pending: Any  # (a datetime, or None)


@dataclass(frozen=True)
class TableFailed(Record):
    """A table (or a fan-in's history) that failed in a run; the others went on."""

    KIND: ClassVar[str] = "table_failed"
    table: str
    error: str


@dataclass(frozen=True)
class Run(Record):
    """One run of a consumer over its tables (sync/runs.py)."""

    KIND: ClassVar[str] = "run"
    consumer: str
    tables: int
    failed: list[str]
    batches: int
    events: int
    upserted: int
    deleted: int
    seconds: float


@dataclass(frozen=True)
class RunFailed(Record):
    """A follower's run that failed as a whole; it retries after a pause (sync/follow.py)."""

    KIND: ClassVar[str] = "run_failed"
    error: str
    failures: int


@dataclass(frozen=True)
class Cut(Record):
    """The cut a pass recorded (sync/pass_cut.py): its name, the Delta tables in it, those left out."""

    KIND: ClassVar[str] = "cut"
    cut: str
    tables: int
    left_out: list[str]


@dataclass(frozen=True)
class History(Record):
    """A history's fold up to its mirror's version (sync/history_folds.py)."""

    KIND: ClassVar[str] = "history"
    table: str
    opened: int
    closed: int
    mirror_version: int


@dataclass(frozen=True)
class CopyStart(Record):
    """A copy in chunks begun (sync/chunked_copy.py); `total`: estimated rows, 0 if unknown."""

    KIND: ClassVar[str] = "copy_start"
    table: str
    total: int


@dataclass(frozen=True)
class CopyResume(Record):
    """A copy in chunks resumed after its last committed chunk."""

    KIND: ClassVar[str] = "copy_resume"
    table: str
    chunk: int
    rows: int
    total: int


@dataclass(frozen=True)
class CopyChunk(Record):
    """A chunk of a copy committed (sync/progress.py); `done`: it was the last."""

    KIND: ClassVar[str] = "copy_chunk"
    table: str
    chunk: int
    rows: int
    total: int
    rows_per_second: int
    eta_seconds: int | None
    done: bool


@dataclass(frozen=True)
class Compact(Record):
    """A table's files compacted (and, by `pgcdc compact`, vacuumed) (sync/compact.py)."""

    KIND: ClassVar[str] = "compact"
    table: str
    path: str
    seconds: float
    files_removed: int
    files_added: int
    vacuumed: int
