"""`pgcdc status`: a person should see at a glance whether capture and sync are healthy."""

from __future__ import annotations

from datetime import datetime, timezone

import psycopg

from pgcdc import capture


def _age(ts: datetime | None) -> str:
    if ts is None:
        return "-"
    seconds = int((datetime.now(timezone.utc) - ts).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def table_lines(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as aligned text lines (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def capture_status(conn: psycopg.Connection) -> str:
    """Text report of the capture side: per table pending events and age, queue size."""
    tables = capture.stats(conn)
    partitions, size = capture.queue_size(conn)
    lines = [f"pgcdc schema v{capture.installed_version(conn)} in database {conn.info.dbname}; "
             f"queue: {partitions} partitions, {_size(size)}"]
    if not tables:
        lines.append("no tables attached; run `pgcdc attach SCHEMA.TABLE`")
        return "\n".join(lines)
    rows = [("table", "consumers", "pending events", "pending keys", "oldest pending")]
    rows += [(t.table_name, str(t.consumers), str(t.pending_events), str(t.pending_keys), _age(t.oldest_pending))
             for t in tables]
    lines += table_lines(rows)
    never = [t.table_name for t in tables if t.consumers == 0]
    if never:
        lines.append(f"not synced yet: {', '.join(never)}; run `pgcdc ingest`")
    return "\n".join(lines)
