"""A pass's snapshot of the reader: taken and exported once, held open on a connection of its own
for the pass, and imported by every connection that reads for it (docs/readers.md).

A snapshot only exists while the transaction that exported it is open, so the holding
connection does nothing else; each reading transaction imports it first (`importing`; JDBC
connections through their init statements, source/enrich.py). Every reader of one pass then sees
the same committed transactions: the queue's events and the tables' rows agree.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from pgcdc.errors import TargetError
from pgcdc.source.events import Snapshot, take_snapshot


@dataclass(frozen=True)
class Held:
    """A snapshot exported for a pass: what it shows, and its id for SET TRANSACTION SNAPSHOT."""

    snap: Snapshot
    exported: str
    limit: float | None = None  # seconds a standby lets it live before replay may cancel it; None: no limit


def import_statements(exported: str) -> list[str]:
    """The statements that make a transaction read in the exported snapshot (first in it)."""
    if not re.fullmatch(r"[0-9A-F-]+", exported):
        raise ValueError(f"not a snapshot id: {exported!r}")
    return ["SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", f"SET TRANSACTION SNAPSHOT '{exported}'"]


@contextmanager
def hold(connect: Callable[[], psycopg.Connection]) -> Iterator[tuple[Held, Callable[[], None]]]:
    """Export a snapshot on a new reader connection and hold it until the block ends, or until
    the release function it gives is called (from any thread: the connection is closed, which
    ends the transaction)."""
    conn = connect()
    lock = threading.Lock()

    def release() -> None:
        with lock:
            conn.close()
    try:
        conn.execute("begin isolation level repeatable read, read only")  # (an autocommit connection)
        snap = take_snapshot(conn)
        exported = conn.execute("select pg_export_snapshot()").fetchone()[0]
        yield Held(snap, exported, _replay_limit(conn) if snap.standby else None), release
    finally:
        release()


def _replay_limit(conn: psycopg.Connection) -> float | None:
    """On a standby: how long replay waits for a snapshot that conflicts with it before it cancels
    the session holding it (max_standby_streaming_delay), or None if it never does (-1, or
    hot_standby_feedback on: the primary keeps what the snapshot needs)."""
    feedback, delay = conn.execute(
        "select current_setting('hot_standby_feedback'), "
        "(select setting::float8 from pg_catalog.pg_settings where name = 'max_standby_streaming_delay')").fetchone()
    return None if feedback == "on" or delay < 0 else delay / 1000


@contextmanager
def importing(conn: psycopg.Connection, held: Held) -> Iterator[None]:
    """A read-only transaction on `conn` that reads in the held snapshot. Fails naming the likely
    cause where the reader cannot import it (another server behind one DSN)."""
    with conn.transaction():
        try:  # (one round trip: a statement without parameters goes by the simple protocol, which takes two)
            conn.execute("; ".join(import_statements(held.exported)))
        except psycopg.Error as exc:
            raise TargetError(f"the reader could not import the pass's snapshot ({exc.diag.message_primary}): the "
                              "transaction holding it ended (on a standby, a recovery conflict cancels it past "
                              "max_standby_streaming_delay), or source.replica_dsn (or source.dsn) leads to more than "
                              "one server; point it at one server, or set ingest.cuts = false") from None
        yield


@contextmanager
def reading(conn: psycopg.Connection, held: Held | None = None) -> Iterator[None]:
    """A read-only REPEATABLE READ transaction on `conn`: in the held snapshot (`importing`), or in
    one of its own."""
    if held is not None:
        with importing(conn, held):
            yield
        return
    with conn.transaction():
        conn.execute("set transaction isolation level repeatable read, read only")
        yield
