"""`pgcdc status`: a person should see at a glance whether capture and sync are healthy."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg

from pgcdc import capture

LAGGING = timedelta(hours=1)  # a change older than this still pending deserves attention


def _age(ts: datetime | None) -> str:
    if ts is None:
        return "-"
    seconds = int((datetime.now(timezone.utc) - ts).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def table_lines(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as aligned text lines (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def consumer_rows(conn: psycopg.Connection) -> list[tuple[str, str, int, int, datetime, str]]:
    """(consumer, table, watermark, batch, last sync, target) from the PostgreSQL mirror."""
    return conn.execute(
        "select s.consumer, format('%I.%I', n.nspname, c.relname), s.watermark::text::bigint, s.batch, "
        "s.updated_at, s.target from pgcdc.consumer_state s join pgcdc.attached a using (table_id) "
        "join pg_class c on c.oid = a.relid join pg_namespace n on n.oid = c.relnamespace order by 1, 2").fetchall()


def status_report(conn: psycopg.Connection) -> str:
    """Text report: a verdict line, capture per table, consumers per table, queue size."""
    tables = capture.stats(conn)
    partitions, size = capture.queue_size(conn)
    lines: list[str] = []
    problems = []
    never = [t.table_name for t in tables if t.consumers == 0]
    if never:
        problems.append(f"never synced: {', '.join(never)} (run `pgcdc ingest`)")
    now = datetime.now(timezone.utc)
    lagging = [t.table_name for t in tables if t.oldest_pending and now - t.oldest_pending > LAGGING and t.consumers]
    if lagging:
        problems.append(f"changes pending for over {LAGGING}: {', '.join(lagging)} (is the ingest job scheduled?)")
    if not tables:
        lines.append("status: NOTHING TO DO - no tables attached; run `pgcdc attach SCHEMA.TABLE`")
    elif problems:
        lines.append("status: ATTENTION - " + "; ".join(problems))
    else:
        oldest = min((t.oldest_pending for t in tables if t.oldest_pending), default=None)
        lines.append(f"status: OK - {len(tables)} table(s) synced; oldest pending change: "
                     f"{_age(oldest) + ' old' if oldest else 'none'}")
    lines.append(f"pgcdc schema v{capture.installed_version(conn)} in database {conn.info.dbname}; "
                 f"queue: {partitions} partitions, {_size(size)}")
    if tables:
        lines.append("")
        rows = [("table", "consumers", "pending events", "pending keys", "oldest pending")]
        rows += [(t.table_name, str(t.consumers), str(t.pending_events), str(t.pending_keys), _age(t.oldest_pending))
                 for t in tables]
        lines += table_lines(rows)
    consumers = consumer_rows(conn)
    if consumers:
        lines.append("")
        rows = [("consumer", "table", "watermark", "batch", "last sync", "delta table")]
        rows += [(c, t, str(w), str(b), _age(at) + " ago", path) for c, t, w, b, at, path in consumers]
        lines += table_lines(rows)
    return "\n".join(lines)
