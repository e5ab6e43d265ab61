"""A partition truncated or dropped, against an ordinary batch and a copy of the whole table, in one
run (not a test; never fails on timing).

    python -m bench.partition_changes [--rows 20000000] [--partitions 100] [--writes 1000]

On a throwaway PostgreSQL and local Spark: a table of --rows rows ranged by id into --partitions
partitions of equal size, synced once (the fast engine, local Delta); one partition truncated
and synced (untimed: the code paths' first use). Then, one after another: --writes updated rows
alone (an ordinary batch), a partition truncated, a partition dropped, each followed by a run
that is timed (the run alone), and a copy of the whole table in chunks (a resync). For each,
the rows PostgreSQL read from the table's partitions in that run (pg_stat_user_tables:
seq_tup_read + idx_tup_fetch). Goal: a partition truncated or dropped <= 0.1x the copy.
"""

from __future__ import annotations

import argparse

import psycopg

from bench.common import local_job, throwaway, timed_run
from pgcdc.source import capture
from pgcdc.sync.runs import run_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--writes", type=int, default=1000, help="rows updated in the ordinary batch")
    args = ap.parse_args()
    per = args.rows // args.partitions
    with throwaway("partition_changes", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            capture.install(conn)
            print(f"loading {args.rows:,} rows into {args.partitions} partitions ...", flush=True)
            conn.execute("create table t (id bigint primary key, v int not null, s text) partition by range (id)")
            for p in range(args.partitions):
                conn.execute(f"create table t_p{p} partition of t for values from ({p * per}) to ({(p + 1) * per})")
            conn.execute(f"insert into t select i, i % 1000, md5(i::text) from generate_series(0, {per * args.partitions - 1}) i")
            conn.execute("vacuum analyze t")
            capture.attach(conn, "t")
            job = local_job(pg.dsn(), work)
            run_job(job)
            conn.execute(f"truncate t_p{args.partitions - 1}")  # (untimed: the code paths' first use)
            run_job(job)

            def timed(label: str, statement: str | None, copy: bool = False) -> tuple[str, float, int]:
                return timed_run(conn, job, "t\\_p%", label, statement, "public.t" if copy else None)

            every = max(1, args.rows // args.writes)
            print("\nan ordinary batch, a partition truncated, one dropped, then a copy in chunks", flush=True)
            results = [
                timed(f"{args.writes} rows updated (an ordinary batch)",
                      f"update t set v = v + 1 where id in (select generate_series(1, {args.rows - 1}, {every}))"),
                timed(f"a partition of {per:,} rows truncated", "truncate t_p10"),
                timed(f"a partition of {per:,} rows dropped", "drop table t_p20"),
                timed("a copy of the table in chunks (resync)", None, copy=True),
            ]
        batch, copy = results[0][1], results[-1][1]
        print(f"\nresults ({args.rows:,} rows in {args.partitions} partitions):")
        for label, seconds, read in results[1:-1]:
            print(f"  {label:50s} {seconds:7.2f}s ({seconds - batch:+.2f}s over a batch), {seconds / copy:5.2f}x a "
                  f"copy ({copy:.2f}s), {read:,} rows read")


if __name__ == "__main__":
    main()
