"""A chunked copy's progress (sync/chunked_copy.py) for a person and a scheduler: a bar on a terminal
(rows, percent, rate, time left), else one log record per chunk (JSON fields with
`--log-format json`), and the follower's gauges (`RunContext.on_copy`). `pgcdc status` reads the
progress the last chunk committed (pgcdc.consumer_state.copy_progress)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from pgcdc import records
from pgcdc.log import on_terminal

if TYPE_CHECKING:
    from pgcdc.sync.context import RunContext
    from pgcdc.watermark import CopyProgress


_log = logging.getLogger(__name__)
_BAR = threading.Lock()  # held by the Meter showing a bar (rich shows one live display at a time)


def eta_seconds(rows: int, total: int, rate: float) -> float | None:
    """Seconds left at `rate` rows/s for a copy at `rows` of ~`total` (None: unknown)."""
    if total <= 0 or rate <= 0:
        return None
    return max(0.0, (total - rows) / rate)


def reached(rows: int, total: int) -> str:
    """How far a copy got, in a few words: its share of ~`total` rows, or its rows where the
    total is unknown (0)."""
    return f"{min(1.0, rows / total):.0%}" if total > 0 else f"{rows:,} rows"


def duration(seconds: float | None) -> str:
    """`seconds` in words a person reads at a glance."""
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Meter:
    """One table's copy progress within one run (a resumed copy starts from the rows it had)."""

    def __init__(self, ctx: "RunContext", table: str, copy: "CopyProgress", rows_per_chunk: int) -> None:
        self.ctx, self.table = ctx, table
        self.rows, self.chunks, self.total = copy.rows, copy.chunks, copy.total
        self.first_rows, self.began = copy.rows, time.monotonic()
        self.bar: Any = None
        if on_terminal() and _BAR.acquire(blocking=False):  # (one bar at a time: lanes copying at once log lines)
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(TextColumn(f"{table}: copying"), BarColumn(), MofNCompleteColumn(),
                                TaskProgressColumn(), TextColumn("rows, {task.fields[rate]} rows/s,"),
                                TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True)
            self.task = self.bar.add_task("copy", total=copy.total or None, completed=copy.rows, rate="-")
            self.bar.start()

    def chunk(self, copy: "CopyProgress | None", written: int) -> None:
        """After a chunk's commit: `copy`, the progress it committed (None: it was the last);
        `written`, the rows it wrote."""
        self.chunks += 1
        self.rows = copy.rows if copy is not None else self.rows + written
        total = max(self.total, self.rows) if self.total else 0
        seconds = time.monotonic() - self.began
        rate = (self.rows - self.first_rows) / seconds if seconds > 0 else 0.0
        eta = 0.0 if copy is None else eta_seconds(self.rows, total, rate)
        done = "" if not total else f" of ~{total:,} ({self.rows / total:.0%})"
        if copy is None:
            message = f"{self.table}: copy done: {self.rows:,} rows in {self.chunks} chunks"
        else:
            message = (f"{self.table}: chunk {self.chunks} copied: {self.rows:,} rows{done}, {rate:,.0f} rows/s, "
                       f"{duration(eta)} left")
        self.ctx.say(message, logging.DEBUG if self.bar is not None and copy is not None else logging.INFO,
                     records.CopyChunk(self.table, self.chunks, self.rows, total, round(rate),
                                       None if eta is None else round(eta), copy is None), log=_log)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.rows, total=total or None, rate=f"{rate:,.0f}")
        if self.ctx.on_copy is not None:
            self.ctx.on_copy(self.table, 1.0 if copy is None else (self.rows / total if total else 0.0), eta)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            _BAR.release()
