"""What a run did to a table, and how a failure reads in the log and in `pgcdc status`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import datetime

import psycopg

from pgcdc import records
from pgcdc.errors import first_line
from pgcdc.source.batch_read import ColumnsChanged


@dataclass
class TableReport:
    """What one run did to one table."""

    table: str
    path: str
    batches: int = 0
    events: int = 0
    upserted: int = 0
    deleted: int = 0
    copied: int | None = None  # rows of a first sync
    reconciled: int | None = None  # keys that differed when the table was reconciled by range (sync/reconcile.py)
    watermark: int = 0
    pending_events: int = 0
    oldest_pending: datetime | None = None  # when the oldest event not applied yet was queued

    @property
    def wrote(self) -> bool:
        """Whether the run wrote to the table (a batch or a copy)."""
        return bool(self.batches) or self.copied is not None or self.reconciled is not None

    def record(self) -> records.TableDone:
        """The machine-readable record of what the run did to the table."""
        return records.TableDone(**asdict(self))

    def line(self) -> str:
        what = f"copied {self.copied} rows, then " if self.copied is not None else \
            f"reconciled by range ({self.reconciled} keys differed), then " if self.reconciled is not None else ""
        return (f"{self.table}: {what}{self.events} events in {self.batches} batches, {self.upserted} upserted, "
                f"{self.deleted} deleted; watermark {self.watermark}; {self.pending_events} events pending "
                f"-> {self.path}")


# SQLSTATEs of a source that changed under a run: a column or table gone (DDL between the run's
# check and Spark's read), the server shutting down, restarting or the connection lost
UNDEFINED_COLUMN = "42703"
_RACED_STATES = (UNDEFINED_COLUMN, "42P01", "57P01", "57P02", "57P03", "08")


@contextmanager
def columns_read() -> Iterator[None]:
    """A read of the table's rows: PostgreSQL refusing it for a column the run checked that is no
    longer there (renamed or dropped since: pgcdc._columns_are) is raised as ColumnsChanged, for
    the run to change the Delta table in place or copy it."""
    try:
        yield
    except Exception as exc:
        if source_state(exc) != UNDEFINED_COLUMN:
            raise
        raise ColumnsChanged(first_line(exc)) from exc
_RACED_TEXT = re.compile(r"PSQLException: (ERROR|FATAL): (column .* does not exist|relation .* does not exist|"
                         r"terminating connection|the database system is (shutting down|starting up|in recovery mode))"
                         r"|PSQLException: (Connection refused|An I/O error occurred|This connection has been closed)")


def source_state(exc: BaseException) -> str | None:
    """The SQLSTATE of the PostgreSQL error behind `exc` (psycopg's, or the JDBC driver's in the
    JVM exception's causes), or None."""
    if isinstance(exc, psycopg.Error):
        return exc.sqlstate
    java = getattr(exc, "java_exception", None)
    for _ in range(20):  # (the cause chain, bounded)
        if java is None:
            return None
        with suppress(Exception):
            if str(java.getClass().getName()) == "org.postgresql.util.PSQLException":
                return str(java.getSQLState())
        try:
            java = java.getCause()
        except Exception:
            return None
    return None


RACED = "; PostgreSQL changed under this run (DDL on the table, a restart): nothing was half-applied, and the next run " \
    "picks it up"


def raced(exc: BaseException) -> bool:
    """Whether `exc` is PostgreSQL changing under the run (DDL on the table, a restart, a lost
    connection): nothing is half-applied and the next run picks it up."""
    state = source_state(exc)
    if state is not None:
        return state.startswith(_RACED_STATES)
    return isinstance(exc, psycopg.OperationalError) or _RACED_TEXT.search(str(exc)) is not None


REWRITTEN = "was rewritten while it was read"  # (pgcdc._columns_are's words: sql/functions/columns_are.sql)


def rewritten(exc: BaseException) -> bool:
    """Whether `exc` is a read refused because a rewrite of its table (TRUNCATE, ALTER TABLE)
    overtook its snapshot (pgcdc._columns_are): read in a new snapshot, it may go through."""
    return source_state(exc) == UNDEFINED_COLUMN and REWRITTEN in first_line(exc)
