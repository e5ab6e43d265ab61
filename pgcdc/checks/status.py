"""`pgcdc status`: a person should see at a glance whether capture and sync are healthy."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

from pgcdc.lake import tablelog, verified
from pgcdc.source import capture, consumers, partitions, schemas
from pgcdc.checks import coverage
from pgcdc.sync import watch
from pgcdc.sync.progress import duration, reached

LAGGING = timedelta(hours=1)  # a change older than this still pending deserves attention


def age(ts: datetime | None) -> str:
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


def table_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as aligned text lines (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _capture_problems(conn: psycopg.Connection) -> list[str]:
    """Attached tables whose capture no longer fits them (DDL unseen by the event trigger), or whose
    capture triggers are missing or disabled: their changes are not queued."""
    rows = conn.execute(  # (a partitioned table's triggers sit on every table of its tree)
        "select a.table_id, format('%I.%I', n.nspname, c.relname), "
        "  count(t.oid) filter (where t.tgenabled in ('O', 'A')), count(t.oid) filter (where t.tgenabled = 'D'), "
        "  count(t.oid) filter (where t.tgenabled = 'R'), a.predicate is null and a.members is null, "
        "  coalesce(cardinality(a.members), 1) "
        "from pgcdc.attached a join pg_class c on c.oid = a.relid join pg_namespace n on n.oid = c.relnamespace "
        "left join pg_trigger t on t.tgrelid = any(coalesce(a.members, array[a.relid::oid])) and t.tgname in "
        "  ('pgcdc_capture_ins', 'pgcdc_capture_upd', 'pgcdc_capture_pk', 'pgcdc_capture_del', 'pgcdc_capture_trunc') "
        "group by 1, 2 order by 2").fetchall()
    gapped = partitions.gaps(conn, {r[0]: r[1] for r in rows})
    problems = [f"capture of {r[1]} does not cover the whole table: {gapped[r[0]]}; until then each run copies it"
                for r in rows if r[0] in gapped]
    broken = conn.execute(
        "select format('%I.%I', n.nspname, c.relname), min(q.at), max(q.payload->>'capture_error') "
        "from pgcdc.commit_queue q join pgcdc.attached a using (table_id) join pg_class c on c.oid = a.relid "
        "join pg_namespace n on n.oid = c.relnamespace "
        "where q.op = 'T' and q.payload ? 'capture_error' and q.txid >= coalesce("
        "  (select min(s.watermark) from pgcdc.consumer_state s where s.table_id = a.table_id), '0') "
        "group by 1 order by 1").fetchall()
    unfit = conn.execute(
        "select format('%I.%I', n.nspname, c.relname), string_agg(u.col, ', ') "
        "from pgcdc.attached a join pg_class c on c.oid = a.relid join pg_namespace n on n.oid = c.relnamespace "
        "cross join lateral unnest(a.key_columns || coalesce(a.predicate_columns, '{}')) u(col) "
        "where not exists (select 1 from pg_attribute t where t.attrelid = a.relid and t.attname = u.col "
        "                    and not t.attisdropped) group by 1 order by 1").fetchall()
    named = {b[0] for b in broken}
    for table, columns in unfit:  # (even right after a copy took the queued copies away)
        if table not in named:
            problems.append(f"capture of {table} names columns the table no longer has ({columns}): each write "
                            f"queues a whole-table copy instead of its keys; run `pgcdc attach {table}` so capture "
                            "follows the table again")
    for table, since, error in broken:
        problems.append(f"capture of {table} no longer fits the table ({error}, since {age(since)} ago): each write "
                        f"queues a whole-table copy instead of its keys; run `pgcdc attach {table}` so capture "
                        "follows the table again")
    for table_id, table, enabled, disabled, replica, has_pk_trigger, members in rows:
        if table_id in gapped:
            continue
        expected = (5 if has_pk_trigger else 4) * members
        if replica:
            problems.append(f"capture of {table} fires only under session_replication_role = replica (ALTER TABLE ... "
                            "ENABLE REPLICA TRIGGER): its changes are not queued; run `pgcdc attach "
                            f"{table}` and `pgcdc resync {table}`")
        elif disabled:
            problems.append(f"capture of {table} is disabled (ALTER TABLE ... DISABLE TRIGGER): its changes are not "
                            f"queued; enable the pgcdc_capture_* triggers again and run `pgcdc resync {table}`")
        elif enabled < expected:
            problems.append(f"capture triggers of {table} are missing: its changes are not queued; run "
                            f"`pgcdc attach {table}` and `pgcdc resync {table}`")
    return problems


def _dropped_problems(conn: psycopg.Connection) -> list[str]:
    """Attached tables that were dropped (detached then by pgcdc), with the Delta tables they were
    synced into, until `pgcdc detach NAME` acknowledges them."""
    rows = conn.execute("select table_name, at, targets from pgcdc.forgotten order by at").fetchall()
    return [f"attached table {name} was dropped {age(at)} ago and is no longer synced (detached by pgcdc)"
            + (f"; its Delta table(s) {', '.join(targets)} stay as they are" if targets else "")
            + f": remove them if unwanted and run `pgcdc detach {name}` to acknowledge"
            for name, at, targets in rows]


def _run_problems(conn: psycopg.Connection) -> list[str]:
    """Consumers whose last run failed or never finished, and tables a successful run left behind."""
    problems = []
    runs = conn.execute(
        "select r.consumer, r.started_at, r.finished_at, r.ok, r.error, r.start_txmin::text::bigint "
        "from pgcdc.consumer_run r order by 1").fetchall()
    for consumer, started, finished, ok, error, start_txmin in runs:
        free = not consumers.is_running(conn, consumer)
        if free and (finished is None or finished < started):
            problems.append(f"the last ingest of consumer {consumer} (started {age(started)} ago) did not finish: "
                            "it was killed or lost its connection; run `pgcdc ingest` (it resumes safely)")
        elif ok is False and finished is not None:  # (while a run goes on, the last one that ended counts)
            problems.append(f"the last ingest of consumer {consumer} failed {age(finished)} ago: {error}; fix that "
                            "and run `pgcdc ingest`")
        if start_txmin is None:
            continue
        behind = conn.execute(
            "select format('%%I.%%I', n.nspname, c.relname), s.updated_at < %s from pgcdc.consumer_state s "
            "join pgcdc.attached a using (table_id) join pg_class c on c.oid = a.relid "
            "join pg_namespace n on n.oid = c.relnamespace "
            "where s.consumer = %s and s.batch > 0 and s.watermark < %s::text::xid8 order by 1",
            (started, consumer, str(start_txmin))).fetchall()
        for table, left_out in behind:
            if left_out:  # (the run did not sync it: the consumer's `tables` no longer name it)
                problems.append(f"consumer {consumer} no longer syncs {table} (its last run left it out) but its "
                                f"state keeps the table's changes queued since then; add it back to the consumer's "
                                f"`tables`, or `pgcdc detach {table}` if no consumer needs it")
            else:
                problems.append(f"consumer {consumer} is stuck on {table}: its last successful run left changes "
                                f"below txid {start_txmin} unapplied; run `pgcdc resync {table}` and report it as a bug")
    return problems


def _file_problems(states: list[coverage.TableState]) -> list[str]:
    """Delta tables in a local folder whose data files are gone (an outside VACUUM with its
    retention check off, a person deleting files): found from each table's own log, before a
    run fails on it. A table elsewhere, or not on this machine, is not checked."""
    problems = []
    for s in states:
        gone = tablelog.listed_missing(s.delta_table) if s.delta_table and s.batch else None
        if gone:
            problems.append(f"{s.delta_table}, the Delta table of {s.table} (consumer {s.consumer}), references data "
                            f"files that are gone ({', '.join(gone)}, ...): it cannot be read; run `pgcdc resync "
                            f"{s.table}`")
    return problems


def _watch(states: list[coverage.TableState]) -> tuple[list[str], dict[tuple[str, str], dict[str, Any]]]:
    """Rows a verify or a follower's watch found different and nobody repaired yet (each a problem
    naming `pgcdc repair`), and how far each watched table's round got: read beside Delta tables
    in a local folder (lake/verified.py, sync/watch.py); a table elsewhere is not read here."""
    problems, watching = [], {}
    for s in states:
        if not s.delta_table or not s.batch:
            continue
        found = verified.last(None, s.delta_table, s.consumer)
        if found is not None and not found.equal:
            problems.append(f"{found.differing} rows of {s.table} differ from its Delta table {s.delta_table} "
                            f"(consumer {s.consumer}), found {age(found.at)} ago by a comparison with PostgreSQL; run "
                            f"`pgcdc repair {s.table}`")
        w = watch.watched(None, s.delta_table, s.consumer)
        if w is not None:
            watching[(s.consumer, s.table)] = {"round": round(w.through(), 3), "round_began": w.round_began,
                                              "every_row_compared_since": w.last_began,
                                              "last_round_ended": w.last_ended}
    return problems, watching


def status_data(conn: psycopg.Connection, problems: list[str] | None = None) -> dict[str, Any]:
    """Whether all is well, and why, as plain data (`pgcdc status --json`): the verdict, its
    problems, capture per table, each consumer's state per table, the queue's size.
    `problems` found by the caller (an unreachable replica) join the verdict."""
    capture.require_schema(conn)
    conn.execute("select pgcdc._forget_dropped()")  # (tables dropped where no event trigger saw it)
    tables = capture.stats(conn)
    partitions, size = capture.queue_size(conn)
    problems = list(problems or [])
    other = capture.restored_from(conn)
    if other is not None:
        problems.append(f"this database was restored from another one (pgcdc was installed in {other}, this is "
                        f"{capture.identity(conn)}): queued events and watermarks are void; "
                        "run `pgcdc reset-watermark`")
    problems += _dropped_problems(conn)
    problems += _capture_problems(conn)
    problems += schemas.uncaptured_problems(conn)
    problems += _run_problems(conn)
    for c in consumers.list_consumers(conn):
        for table in c.resync_needed:
            problems.append(f"consumer {c.name} fell past the queue's retention limit on {table}: its next "
                            "`pgcdc ingest` reconciles the table by range (or copies it, saying why)")
    states = coverage.table_states(conn)
    problems += _file_problems(states)
    differ, watching = _watch(states)
    problems += differ
    running = {c for c in {s.consumer for s in states if s.copy is not None} if consumers.is_running(conn, c)}
    problems += coverage.problems(states, coverage.recorded_tables(conn), running)
    covered = {s.table for s in states}
    never = [t.table_name for t in tables if t.consumers == 0 and t.table_name not in covered]
    if never:
        problems.append(f"never synced: {', '.join(never)} (no consumer's `tables` take it in; add it to a "
                        "consumer's `tables` and run `pgcdc ingest`, or `pgcdc detach` it)")
    now = datetime.now(timezone.utc)
    lagging = [t.table_name for t in tables if t.oldest_pending and now - t.oldest_pending > LAGGING and t.consumers]
    if lagging:
        problems.append(f"changes pending for over {LAGGING}: {', '.join(lagging)} (is the ingest job scheduled?)")
    oldest = min((t.oldest_pending for t in tables if t.oldest_pending), default=None)
    return {
        "healthy": not problems,
        "verdict": "ATTENTION" if problems else "NOTHING TO DO" if not tables else "OK",
        "problems": problems,
        "database": conn.info.dbname,
        "schema_version": capture.installed_version(conn),
        "ddl_guard": capture.ddl_guard(conn),
        "queue": {"partitions": partitions, "bytes": int(size)},
        "oldest_pending": oldest,
        "tables": [{"table": t.table_name, "consumers": t.consumers, "pending_events": t.pending_events,
                    "pending_keys": t.pending_keys, "oldest_pending": t.oldest_pending} for t in tables],
        "synced": [{"consumer": s.consumer, "table": s.table, "state": s.state, "pending_events": s.pending_events,
                    "oldest_pending": s.oldest_pending, "watermark": s.watermark, "batch": s.batch,
                    "last_sync": s.last_sync, "delta_table": s.delta_table, "error": s.error, "worker": s.worker,
                    "copy": s.copy, "watch": watching.get((s.consumer, s.table))}
                   for s in states],
    }


def _copying(copy: dict[str, Any] | None) -> str:
    """A copy under way, in a few words: how far, and the time left at its rate."""
    if copy is None:
        return ""
    at = reached(copy["rows"], copy["total"])
    left = f", {duration(copy['eta_seconds'])} left" if copy["eta_seconds"] is not None else ""
    return f" ({at}{left})"


def status_report(conn: psycopg.Connection, problems: list[str] | None = None) -> tuple[str, bool]:
    """status_data as text for a person, and whether all is well."""
    data = status_data(conn, problems)
    lines: list[str] = []
    if data["problems"]:
        lines.append("status: ATTENTION - " + "; ".join(data["problems"]))
    elif not data["tables"]:
        lines.append("status: NOTHING TO DO - no tables attached; run `pgcdc attach SCHEMA.TABLE`")
    else:
        oldest = data["oldest_pending"]
        lines.append(f"status: OK - {len(data['tables'])} table(s) synced; oldest pending change: "
                     f"{age(oldest) + ' old' if oldest else 'none'}")
    lines.append(f"pgcdc schema v{data['schema_version']} in database {data['database']}; "
                 f"queue: {data['queue']['partitions']} partitions, {_size(data['queue']['bytes'])}")
    if not data["ddl_guard"]:
        lines.append("note: the DDL guard (event triggers pgcdc_ddl, pgcdc_rewrite) is not installed or enabled "
                     "(only a superuser may create them): after a rename or drop of a column capture names, each "
                     "write queues a whole-table copy until `pgcdc attach TABLE`, and a column retyped to its own "
                     "type with USING is not seen; run `pgcdc install` as a superuser to follow DDL by itself "
                     "(see docs/capture.md)")
    if data["tables"]:
        lines.append("")
        rows = [("table", "consumers", "pending events", "pending keys", "oldest pending")]
        rows += [(t["table"], str(t["consumers"]), str(t["pending_events"]), str(t["pending_keys"]),
                  age(t["oldest_pending"])) for t in data["tables"]]
        lines += table_lines(rows)
    if data["synced"]:
        lines.append("")
        synced: list[tuple[str, ...]] = [("consumer", "table", "state", "pending", "oldest pending", "batch",
                                          "last sync", "worker", "delta table")]
        synced += [(c["consumer"], c["table"], c["state"] + _copying(c["copy"]), str(c["pending_events"]),
                    age(c["oldest_pending"]),
                    "-" if c["batch"] is None else str(c["batch"]),
                    "-" if c["last_sync"] is None else age(c["last_sync"]) + " ago", c["worker"] or "-",
                    c["delta_table"] or "-")
                   for c in data["synced"]]
        lines += table_lines(synced)
        for c in (c for c in data["synced"] if c["watch"]):
            w = c["watch"]
            since = w["every_row_compared_since"]
            lines.append(f"watch: {c['consumer']} {c['table']}: this round {w['round']:.0%} through; "
                         f"{'every row compared since ' + since[:19] if since else 'no whole round yet'}")
    return "\n".join(lines), data["healthy"]
