"""Failpoints: named places where tests crash the job (or act as another writer would).

PGCDC_FAILPOINT=<name> kills the process at that place, as a crash would (PGCDC_FAILPOINT_PASS=<n>:
the n+1-th time it gets there), or, with PGCDC_FAILPOINT_RUN=<command>, runs that command there
once (the n+1-th time) and goes on (another writer's DDL at that moment). Tests that run in-process replace `failpoint`
instead. Call it as `faults.failpoint(...)` so the replacement is seen.
"""

from __future__ import annotations

import os
import subprocess

# Every failpoint, in the order a batch passes them (a copy in one snapshot passes before-copy-commit
# instead of the merge's three, each chunk of a copy in chunks before-chunk-commit, after-commit
# and after-chunk-commit; after-compact comes after a table's last batch of a run, where its small
# files were compacted); the randomized test crashes at each.
FAILPOINTS = ("before-merge", "before-commit", "before-copy-commit", "after-merge", "after-commit",
              "after-state-file", "after-compact", "before-chunk-commit", "after-chunk-commit")


_passed = 0


def failpoint(name: str) -> None:
    """Kill the process here if PGCDC_FAILPOINT names this place, once it has been passed
    PGCDC_FAILPOINT_PASS times (default 0: the first time)."""
    global _passed
    if os.environ.get("PGCDC_FAILPOINT") == name:
        at = int(os.environ.get("PGCDC_FAILPOINT_PASS", "0"))
        command = os.environ.get("PGCDC_FAILPOINT_RUN")
        if _passed >= at and not command:
            os._exit(99)
        if _passed == at and command:
            subprocess.run(command, shell=True, check=True)
        _passed += 1
