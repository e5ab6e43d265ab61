"""The pgcdc error tree.

Every error pgcdc raises on purpose is a PgcdcError; each subclass also inherits
the built-in exception that fits, so callers may catch either. Messages name the
object at fault and say what to do next; they never contain secrets.

    PgcdcError
    ├── ConfigError      (ValueError)       invalid or missing settings
    ├── SetupError       (RuntimeError)     Java, PostgreSQL binaries or jars missing
    ├── SourceError      (ConnectionError)  cannot reach or log in to PostgreSQL
    ├── SchemaError      (RuntimeError)     pgcdc schema missing or of another version
    ├── TableError       (LookupError)      unknown table, no primary key, not attached
    ├── TargetError      (RuntimeError)     Delta table unusable (other consumer, schema drift)
    │   └── ConflictError                   another writer committed to the table mid-batch
    ├── BusyError        (RuntimeError)     another job holds the consumer
    └── StoppedError     (RuntimeError)     a one-shot run stopped between batches by SIGTERM/SIGINT

Every command exits with one of the codes below, the same in every command (docs/operations.md):
a scheduler retries FAILURE and BUSY, and pages a person for ATTENTION and USAGE.
"""

from __future__ import annotations

import re
from contextlib import suppress

import psycopg


OK = 0  # done; healthy
ATTENTION = 1  # the command ran and found something a person must look at (status, verify)
USAGE = 2  # bad arguments or settings, or something pgcdc refuses until a person acts
BUSY = 3  # another run holds the consumer: try again later
FAILURE = 4  # the run failed part-way (nothing half-applied); a retry may get further
INTERRUPTED = 130  # stopped by a signal (between batches, or at once by a second one); the next run goes on


class PgcdcError(Exception):
    """Base of every error pgcdc raises on purpose."""

    exit_code = USAGE


class ConfigError(PgcdcError, ValueError):
    """Settings are invalid or a config file is missing."""


class SetupError(PgcdcError, RuntimeError):
    """The machine lacks something pgcdc needs (Java 17+, PostgreSQL binaries, jars)."""


class SourceError(PgcdcError, ConnectionError):
    """PostgreSQL cannot be reached or refuses the login; `transient`: it may answer later
    (refused, timed out, restarting), unlike a refused login or a malformed DSN."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.exit_code = FAILURE if transient else USAGE


class SchemaError(PgcdcError, RuntimeError):
    """The pgcdc schema is not installed, or its version differs from the package's."""


class TableError(PgcdcError, LookupError):
    """A table is unknown, has no primary key, or is not attached."""


class TargetError(PgcdcError, RuntimeError):
    """A Delta target cannot be written safely (owned elsewhere, incompatible schema)."""


class ConflictError(TargetError):
    """Another writer committed to a Delta table while a batch was applied; the batch did not
    land and the next run applies it again."""

    exit_code = FAILURE


class BusyError(PgcdcError, RuntimeError):
    """Another job is already running for the same consumer."""

    exit_code = BUSY


class StoppedError(PgcdcError, RuntimeError):
    """A one-shot run stopped between batches on SIGTERM/SIGINT (a scheduler's timeout): what is
    committed stays, the next run goes on from there."""

    exit_code = INTERRUPTED


def first_line(exc: BaseException) -> str:
    """What `pgcdc status` shows of a failed run: the error's first line (for a JVM error, the
    JVM exception's own message, not Py4J's "An error occurred while calling ..."), its type if empty."""
    java = getattr(exc, "java_exception", None)
    text = str(exc)
    if java is not None:
        with suppress(Exception):
            text = str(java.toString())
        # PostgreSQL's own error (a value refused by pgcdc._unfit, ...) deep inside Spark's task failure
        source = re.search(r"PSQLException: ERROR: (.*)", str(exc))
        if source is not None:
            return f"PostgreSQL: {source.group(1).strip()[:500]}"
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return f"PostgreSQL: {exc.diag.message_primary[:500]}"
    lines = text.strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
