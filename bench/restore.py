"""reset-watermark after a restore against a copy of the table, in one run (not a test; never
fails on timing).

    python -m bench.restore [--rows 5000000] [--changed 0.001] [--clustered]

On a throwaway PostgreSQL and local Spark: a table of --rows rows synced once (the fast engine,
local Delta); a base backup taken (a standby, stopped); then --changed of the rows updated (a
tenth of them deleted instead; spread over the table, or with --clustered the newest ids) and
synced, so Delta holds changes the backup lacks; the backup
started as the restored primary, with new traffic. Timed one after another on it: `pgcdc
reset-watermark` (the table wound back, the rows Delta changed since read again), then a copy
of the table in chunks (`resync`), as reset-watermark did before. Goal (issue): <= 0.3x the copy.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import load_attached, local_job, throwaway
from pgcdc.checks.rewind import reset_watermark
from pgcdc.localpg import LocalPostgres
from pgcdc.sync.runs import resync_tables, run_job


def _caught_up(primary: psycopg.Connection, standby: LocalPostgres) -> None:
    lsn = primary.execute("select pg_current_wal_insert_lsn()").fetchone()[0]
    while True:
        with psycopg.connect(standby.dsn(), autocommit=True) as s:
            if s.execute("select pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
                return
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--changed", type=float, default=0.001, help="fraction of the rows changed after the backup")
    ap.add_argument("--clustered", action="store_true", help="change the newest ids, not every k-th row")
    args = ap.parse_args()
    backup = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-backup-")))
    with throwaway("restore", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        try:
            with psycopg.connect(pg.dsn(), autocommit=True) as conn:
                load_attached(conn, args.rows)
                run_job(local_job(pg.dsn(), work))
                print("taking the backup ...", flush=True)
                backup.start_standby_of(pg)
                _caught_up(conn, backup)
                backup.stop()
                every = max(1, round(1 / args.changed))
                if args.clustered:  # (the newest rows: what an application mostly changes)
                    newest = args.rows - args.rows // every
                    conn.execute(f"update t set v = -1 where id > {newest} and id % 10 <> 0")
                    conn.execute(f"delete from t where id > {newest} and id % 10 = 0")
                else:
                    conn.execute(f"update t set v = -1 where id % {every} = 0 and id % {every * 10} <> 0")
                    conn.execute(f"delete from t where id % {every * 10} = 0")
                run_job(local_job(pg.dsn(), work))  # Delta holds what the restore loses
            pg.stop()
            (backup.datadir / "standby.signal").unlink()
            backup.start()
            with psycopg.connect(backup.dsn(), autocommit=True) as r:
                for _ in range(200):  # new traffic: the next txid passes Delta's watermark
                    r.execute("select pg_current_xact_id()")
            job = local_job(backup.dsn(), work)
            began = time.perf_counter()
            done = reset_watermark(job.settings, job.spark, print)
            reset = time.perf_counter() - began
            began = time.perf_counter()
            resync_tables(job, ["public.t"])
            copy = time.perf_counter() - began
            where = "the newest ids" if args.clustered else "spread over the table"
            print(f"\nresults ({args.rows:,} rows, {args.changed:.2%} changed after the backup, {where}):")
            print(f"  reset-watermark {reset:7.2f}s  {reset / copy:5.2f}x a copy ({copy:.2f}s): {done[0].line()}")
        finally:
            backup.stop(remove=True)


if __name__ == "__main__":
    main()
