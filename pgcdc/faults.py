"""Failpoints: named places where tests crash the job (or act as another writer would).

PGCDC_FAILPOINT=<name> kills the process at that place, as a crash would; tests that
run in-process replace `failpoint` instead. Call it as `faults.failpoint(...)` so the
replacement is seen.
"""

from __future__ import annotations

import os


def failpoint(name: str) -> None:
    """Kill the process here if PGCDC_FAILPOINT names this place."""
    if os.environ.get("PGCDC_FAILPOINT") == name:
        os._exit(99)
