"""Failpoints: named places where tests crash the job (or act as another writer would).

PGCDC_FAILPOINT=<name> kills the process at that place, as a crash would; tests that
run in-process replace `failpoint` instead. Call it as `faults.failpoint(...)` so the
replacement is seen.
"""

from __future__ import annotations

import os

# Every failpoint, in the order a batch passes them (a first sync passes before-copy-commit
# instead of the merge's three); the randomized test crashes at each.
FAILPOINTS = ("before-merge", "before-commit", "before-copy-commit", "after-merge", "after-commit",
              "after-state-file")


def failpoint(name: str) -> None:
    """Kill the process here if PGCDC_FAILPOINT names this place."""
    if os.environ.get("PGCDC_FAILPOINT") == name:
        os._exit(99)
