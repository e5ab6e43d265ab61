"""Verify, repair and reconcile against a copy, in one run (not a test; never fails on timing).

    python -m bench.repair [--rows 5000000] [--differ 10] [--quick]

On a throwaway PostgreSQL and local Spark: a table of --rows rows synced once (the fast engine,
local Delta); --differ rows changed behind capture (session_replication_role = replica). Then,
timed one after another: `pgcdc verify` of the table (it names the rows and keeps their key
ranges), `pgcdc repair` soon after (it compares only those ranges), --differ rows changed
behind capture again and `pgcdc repair --all` (the whole table compared, before and after), a
copy of the table in chunks (`resync`), and then, the table detached, --differ rows changed
and attached again, the run that reconciles it by range (sync/reconcile.py). Goal (issue): a
repair of 10 rows <= 0.05x the copy.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from bench.common import load_attached, local_job, throwaway
from pgcdc.checks.repair import repair
from pgcdc.checks.verify import verify
from pgcdc.source import capture
from pgcdc.sync.runs import resync_tables, run_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--differ", type=int, default=10, help="rows changed behind capture")
    ap.add_argument("--quick", action="store_true", help="verify, repair after it and the copy alone (no "
                    "repair --all, no reconcile): the repair goal's figures at a size where the others take long")
    args = ap.parse_args()
    with throwaway("repair", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            load_attached(conn, args.rows)
            job = local_job(pg.dsn(), work)
            run_job(job)
            every = max(1, args.rows // args.differ)

            def behind(value: int) -> None:
                with conn.transaction():
                    conn.execute("set local session_replication_role = replica")
                    conn.execute(f"update t set v = {value} where id in (select generate_series({1 - value}, "
                                 f"{args.rows}, {every}))")
            behind(-1)
            tables = [t for t in capture.list_attached(conn) if t.name == "public.t"]
            root = job.settings.target.root

            def timed(label: str, work_: object) -> float:
                began = time.perf_counter()
                out = work_() if callable(work_) else None
                seconds = time.perf_counter() - began
                line = out[0].line() if isinstance(out, list) and out else ""
                print(f"  {label:48s} {seconds:7.2f}s  {line[:110]}", flush=True)
                return seconds

            def fix(whole: bool) -> object:
                return repair(job.settings, ["public.t"], False, print, job.spark, whole=whole)

            print("\nverify, repair, repair --all, a copy in chunks, then a reconcile after re-attaching", flush=True)
            seconds = {"verify": timed("verify (finds the rows, keeps their ranges)",
                                       lambda: verify(job.spark, conn, root, tables, "bench")),
                       "repair": timed(f"repair of {args.differ} rows after the verify", lambda: fix(False))}
            if not args.quick:
                behind(-2)
                seconds["whole"] = timed(f"repair --all of {args.differ} rows", lambda: fix(True))
            seconds["copy"] = timed("a copy of the table in chunks (resync)", lambda: resync_tables(job, ["public.t"]))
            if not args.quick:
                capture.detach(conn, "public.t")
                behind(-3)
                capture.attach(conn, "public.t")
                seconds["reconcile"] = timed(f"re-attached, {args.differ} rows changed: reconciled",
                                             lambda: run_job(job))
        copy = seconds["copy"]
        print(f"\nresults ({args.rows:,} rows, {args.differ} differing):")
        for name in (n for n in ("verify", "repair", "whole", "reconcile") if n in seconds):
            print(f"  {name:8s} {seconds[name]:7.2f}s  {seconds[name] / copy:5.2f}x a copy ({copy:.2f}s)")


if __name__ == "__main__":
    main()
