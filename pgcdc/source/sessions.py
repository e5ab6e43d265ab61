"""A run's session with the source: its two connections (primary and reader), the consumer's
lease (a worker's, or the whole consumer's for a restore), the identity check and the tables
to sync.

The connections are opened for each run, or kept between the runs of a long-lived Job (a
follower's): opening them costs ~10-15 ms a run (a backend started and a password checked
for each), a tenth of a small batch's whole run. A kept pair is checked before its next run
(one round trip each) and replaced if either connection died meanwhile (a server restart,
idle_session_timeout, a terminated backend); a run that ends in an error closes them, so the
next one starts afresh. The lease ends with each run either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import psycopg
from psycopg.pq import TransactionStatus

from pgcdc.settings import SourceSettings
from pgcdc.source import capture, consumers, schemas
from pgcdc.source.capture import AttachedTable
from pgcdc.source.selection import select_tables
from pgcdc.source.db import connect, jdbc_options

Pair = tuple[psycopg.Connection, psycopg.Connection]


class RunSource(NamedTuple):
    """What a run reads from: its connections, the tables, JDBC options and the database's identity."""

    primary: psycopg.Connection
    reader: psycopg.Connection
    tables: list[AttachedTable]
    jdbc: dict[str, str]
    identity: str


class SourceConnections:
    """Hands out the (primary, reader) pair for one run at a time; `keep`: keep it for the next."""

    def __init__(self, source: SourceSettings, keep: bool) -> None:
        self.source = source
        self.keep = keep
        self.kept: Pair | None = None

    @contextmanager
    def session(self) -> Iterator[Pair]:
        """The pair for one run: the kept one if it still answers, else a new one."""
        pair = self._reused() or self._opened()
        clean = False
        try:
            yield pair
            clean = True
        finally:
            if clean and self.keep and all(_idle(c) for c in pair):
                self.kept = pair
            else:
                _close(pair)

    def close(self) -> None:
        """Close a kept pair (the end of a follower)."""
        pair, self.kept = self.kept, None
        if pair is not None:
            _close(pair)

    def _opened(self) -> Pair:
        primary = connect(self.source.dsn)
        try:
            return primary, connect(self.source.reader_dsn, role=self.source.reader_role, reader=True)
        except BaseException:
            primary.close()
            raise

    def _reused(self) -> Pair | None:
        pair, self.kept = self.kept, None
        if pair is None:
            return None
        try:
            for conn in pair:
                conn.execute("select 1")
            if all(_idle(c) for c in pair):
                return pair
        except psycopg.Error:
            pass
        _close(pair)
        return None


@contextmanager
def run_source(connections: SourceConnections, consumer: str, names: list[str], restored: bool,
               say: Callable[[str], None]) -> Iterator[RunSource]:
    """Connections (primary, reader) as a worker of the consumer (or holding it whole if
    `restored`), the tables, JDBC options and the database's identity. Refuses a queue restored
    from another database unless `restored` (reset-watermark), which clears it first."""
    with connections.session() as (primary, reader):
        capture.require_schema(primary)
        if restored:  # (clearing the queue: the whole consumer, no worker beside it)
            consumers.lock(primary, consumer)
        else:  # (workers of one consumer share its tables: runs lease each table, sync/runs.py)
            consumers.join(primary, consumer)
        try:
            if restored:
                deleted = capture.adopt_identity(primary)
                if deleted is not None:
                    say(f"queue: deleted {deleted} events of the database this one was restored from")
            capture.check_identity(primary)
            if not restored:  # (before the tables are chosen: a table a followed schema takes in joins now)
                for line in schemas.follow_new(primary):
                    say(f"schema followed: {line}")
            tables = select_tables(primary, names)
            yield RunSource(primary, reader, tables, jdbc_options(reader), capture.identity(reader))
        finally:
            if connections.keep and not primary.broken and not primary.closed:
                consumers.release(primary, consumer)


def _idle(conn: psycopg.Connection) -> bool:
    return not conn.closed and not conn.broken and conn.info.transaction_status == TransactionStatus.IDLE


def _close(pair: Pair) -> None:
    for conn in pair:
        conn.close()
