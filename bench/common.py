"""What the benchmarks share: a throwaway PostgreSQL and a work folder for one run."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pgcdc.localpg import LocalPostgres


@contextmanager
def throwaway(name: str, **postgres: Any) -> Iterator[tuple[LocalPostgres, Path]]:
    """A started throwaway PostgreSQL (LocalPostgres options `postgres`) and an empty work folder
    named after the benchmark, both removed when the benchmark ends, however it ends."""
    work = Path(tempfile.mkdtemp(prefix=f"pgcdc-bench-{name}-"))
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-pg-")), **postgres)
    try:
        pg.start()
        yield pg, work
    finally:
        pg.stop(remove=True)
        shutil.rmtree(work, ignore_errors=True)


def timed(label: str, work: Callable[[], object], width: int = 62) -> float:
    """Run `work`, print how long it took beside `label`, and return the seconds."""
    began = time.perf_counter()
    work()
    seconds = time.perf_counter() - began
    print(f"  {label:{width}s} {seconds:8.2f}s", flush=True)
    return seconds
