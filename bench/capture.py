"""Capture overhead, measured side by side in one run (not a test; never fails on timing).

    python -m bench.capture [--seconds 20] [--rounds 3] [--scale 10] [--clients 4]

On one throwaway PostgreSQL (durable commits unless --no-fsync) it alternates three
modes (rotating their order each round, vacuum + checkpoint before each measurement): no capture,
pgcdc capture attached to the three tables pgbench TPC-B updates,
and a plain row-level trigger writing one queue row per changed row (the reference
point to beat). It reports pgbench TPS and the time of one 200k-row UPDATE per mode,
as medians over the rounds and as ratios to "none".
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from pgcdc.source import capture
from pgcdc.localpg import LocalPostgres, find_bindir

TABLES = {"pgbench_accounts": "aid", "pgbench_tellers": "tid", "pgbench_branches": "bid"}
MODES = ("none", "pgcdc", "row trigger")


def set_mode(conn: psycopg.Connection, mode: str) -> None:
    """Switch capture on the pgbench tables to `mode`."""
    for table, key in TABLES.items():
        capture.detach(conn, table)
        conn.execute(f"drop trigger if exists bench_row on {table}")
        if mode == "pgcdc":
            capture.attach(conn, table)
        elif mode == "row trigger":
            conn.execute(f"""
                create or replace function bench_row_{table}() returns trigger language plpgsql as $$
                begin
                    insert into pgcdc.commit_queue (txid, slot, table_id, op, keys)
                    values (pg_current_xact_id(), 0, 0, left(tg_op, 1),
                            array[(case when tg_op = 'DELETE' then old.{key} else new.{key} end)::text]);
                    return null;
                end $$""")
            conn.execute(f"create trigger bench_row after insert or update or delete on {table} "
                         f"for each row execute function bench_row_{table}()")
    conn.execute("truncate pgcdc.commit_queue")
    conn.execute("vacuum pgbench_accounts, pgbench_tellers, pgbench_branches, pgbench_history")
    conn.execute("checkpoint")


def pgbench_tps(pg: LocalPostgres, seconds: int, clients: int) -> float:
    env = os.environ | {"PGPASSWORD": pg.password}
    out = subprocess.run([str(find_bindir() / "pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                          "-c", str(clients), "-j", "2", "-T", str(seconds), "-n", "postgres"],
                         capture_output=True, text=True, env=env, check=True).stdout
    return float(re.search(r"tps = ([\d.]+)", out).group(1))


def bulk_update_seconds(conn: psycopg.Connection, rows: int) -> float:
    start = time.perf_counter()
    conn.execute("update pgbench_accounts set abalance = abalance + 1 where aid <= %s", (rows,))
    return time.perf_counter() - start


def statement_micros(conn: psycopg.Connection, statements: int = 20_000) -> float:
    """Microseconds per one-row UPDATE, run `statements` times in one DO block (one backend, one
    transaction, rolled back: no commit and no client round trip, so capture's own cost shows)."""
    loop = (f"do $$ begin for i in 1..{statements} loop update pgbench_accounts set abalance = abalance + 1 "
            "where aid = i; end loop; end $$")
    with conn.transaction(force_rollback=True):
        conn.execute(loop.replace(str(statements), "1000"))  # (warm up: plans, caches)
    with conn.transaction(force_rollback=True):
        start = time.perf_counter()
        conn.execute(loop)
        return (time.perf_counter() - start) * 1e6 / statements


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=20, help="pgbench run length per mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--bulk-rows", type=int, default=200_000)
    ap.add_argument("--no-fsync", action="store_true", help="fsync/synchronous_commit off: CPU cost only")
    args = ap.parse_args()

    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-")), durable=not args.no_fsync,
                       settings={"shared_buffers": "512MB", "max_wal_size": "4GB"})
    pg.start()
    try:
        env = os.environ | {"PGPASSWORD": pg.password}
        subprocess.run([str(find_bindir() / "pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                        "-i", "-q", "-s", str(args.scale), "postgres"], check=True, capture_output=True, env=env)
        tps: dict[str, list[float]] = {m: [] for m in MODES}
        bulk: dict[str, list[float]] = {m: [] for m in MODES}
        micros: dict[str, list[float]] = {m: [] for m in MODES}
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            capture.install(conn)
            for r in range(args.rounds):
                for mode in MODES[r % 3:] + MODES[:r % 3]:  # rotate the order: no mode always runs first
                    set_mode(conn, mode)
                    tps[mode].append(pgbench_tps(pg, args.seconds, args.clients))
                    set_mode(conn, mode)
                    bulk[mode].append(bulk_update_seconds(conn, args.bulk_rows))
                    micros[mode].append(statement_micros(conn))
                    print(f"round {r + 1}/{args.rounds} {mode:12s} tps {tps[mode][-1]:8.0f}  "
                          f"bulk update {bulk[mode][-1]:6.2f}s  one-row UPDATE {micros[mode][-1]:5.1f} us", flush=True)
            set_mode(conn, "none")
    finally:
        pg.stop(remove=True)

    durability = "fsync off" if args.no_fsync else "fsync on"
    print(f"\npgbench TPC-B scale {args.scale}, {args.clients} clients, {args.seconds}s x {args.rounds} rounds, "
          f"{durability}; UPDATE of {args.bulk_rows} rows in one statement")
    base_tps, base_bulk = statistics.median(tps["none"]), statistics.median(bulk["none"])
    base_us = min(micros["none"])
    print(f"{'mode':12s} {'median tps':>10s} {'tps ratio':>9s} {'bulk s':>7s} {'bulk ratio':>10s} {'+us/stmt':>9s}"
          "   per-round tps ratios")
    for mode in MODES:
        t, b = statistics.median(tps[mode]), statistics.median(bulk[mode])
        rounds = " ".join(f"{x / y:.2f}" for x, y in zip(tps[mode], tps["none"]))
        print(f"{mode:12s} {t:10.0f} {t / base_tps:8.2f}x {b:7.2f} {b / base_bulk:9.2f}x "
              f"{min(micros[mode]) - base_us:9.1f}   {rounds}")


if __name__ == "__main__":
    main()
