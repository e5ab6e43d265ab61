"""The commit queue under load, measured (not a test; never fails on timing).

    python -m bench.queue [--rows 5000000] [--seconds 120] [--slot-txids 16384]

1. A huge statement: `INSERT ... SELECT` of --rows rows into an attached table and into a
   table without capture, side by side, each in a new backend: time and the backend's peak
   private memory (RssAnon from /proc, sampled; run as root or as the server's user). Capture groups keys into
   10,000-key chunks as they stream, so its memory does not grow with the statement.
2. A steady writer for --seconds: single-row UPDATE transactions while a consumer keeps up
   (its watermark follows the txmin every second) and pgcdc.maintain() runs every second.
   Reported: events written, queue size over time (max and at the end) against what the
   events would take if consumed history were never reclaimed.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from pgcdc.source import capture
from pgcdc.localpg import LocalPostgres


def private_kb(pid: int) -> int:
    """The process's private resident memory (RssAnon: not the shared buffers it touched), in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError(f"no RssAnon for process {pid}")


def peak_while(pid: int, work: "threading.Thread") -> int:
    """The highest private memory of `pid` while `work` runs (sampled every 20 ms), in kB."""
    peak = private_kb(pid)
    work.start()
    while work.is_alive():
        peak = max(peak, private_kb(pid))
        time.sleep(0.02)
    work.join()
    return peak


def huge_statement(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table plain (id bigint primary key, v int)")
        conn.execute("create table captured (id bigint primary key, v int)")
        capture.attach(conn, "captured")
    results = {}
    for table in ("plain", "captured"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.info.backend_pid
            before = private_kb(pid)
            started = time.perf_counter()
            insert = threading.Thread(target=conn.execute, args=(
                f"insert into {table} select i, 0 from generate_series(1, %s::bigint) i", (rows,)))
            peak = peak_while(pid, insert)
            results[table] = (time.perf_counter() - started, before, peak)
    with psycopg.connect(dsn, autocommit=True) as conn:
        events, keys = conn.execute("select count(*), sum(cardinality(keys)) from pgcdc.commit_queue").fetchone()
    print(f"\n1. INSERT of {rows:,} rows in one statement (a new backend each)")
    print(f"{'table':10s} {'seconds':>8s} {'ratio':>6s} {'private memory peak MB':>23s} {'grew MB':>8s}")
    for table, (seconds, before, after) in results.items():
        print(f"{table:10s} {seconds:8.2f} {seconds / results['plain'][0]:5.2f}x {after / 1024:23.1f} "
              f"{(after - before) / 1024:8.1f}")
    print(f"capture queued {events} events holding {keys:,} keys")


def steady_writes(dsn: str, seconds: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table hot (id int primary key, v int)")
        conn.execute("insert into hot select i, 0 from generate_series(1, 1000) i")
        t = capture.attach(conn, "hot")
        conn.execute("truncate pgcdc.commit_queue")
        conn.execute("insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
                     "values ('bench', %s, '/bench', pg_snapshot_xmin(pg_current_snapshot()), 1)", (t.table_id,))
    stop = time.monotonic() + seconds
    written = [0]

    def writer() -> None:
        with psycopg.connect(dsn, autocommit=True) as w:
            i = 0
            while time.monotonic() < stop:
                w.execute("update hot set v = v + 1 where id = %s", (i % 1000 + 1,))
                i += 1
            written[0] = i

    thread = threading.Thread(target=writer)
    thread.start()
    sizes = []
    per_event = 0.0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while thread.is_alive():
            time.sleep(1)
            per_event = max(per_event, float(conn.execute(
                "select coalesce(avg(pg_column_size(q.*)), 0) from pgcdc.commit_queue q").fetchone()[0]))
            conn.execute("update pgcdc.consumer_state set watermark = pg_snapshot_xmin(pg_current_snapshot())")
            capture.maintain(conn)
            sizes.append(capture.queue_size(conn)[1])
        thread.join()
        left = conn.execute("select count(*) from pgcdc.commit_queue").fetchone()[0]
    never = written[0] * per_event
    print(f"\n2. steady writer, {seconds}s: {written[0]:,} single-row transactions ({written[0] / seconds:.0f}/s), "
          "a consumer keeping up, maintain every second")
    print(f"queue size: max {max(sizes) / 2**20:.1f} MB, at the end {sizes[-1] / 2**20:.1f} MB ({left:,} events); "
          f"all events kept would take ~{never / 2**20:.1f} MB of rows alone "
          f"({max(sizes) / never if never else 0:.2f}x of that at most)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--slot-txids", type=int, default=16384, help="txids per queue slot (the default install: 262144)")
    args = ap.parse_args()
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-")), durable=False,
                       settings={"shared_buffers": "256MB", "max_wal_size": "4GB"})
    pg.start()
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            capture.install(conn, slot_txids=args.slot_txids)
            print(f"PostgreSQL {conn.info.server_version}, work_mem {conn.execute('show work_mem').fetchone()[0]}, "
                  f"slot_txids {args.slot_txids}")
        huge_statement(pg.dsn(), args.rows)
        steady_writes(pg.dsn(), args.seconds)
    finally:
        pg.stop(remove=True)


if __name__ == "__main__":
    main()
