"""A partitioned table against the same rows in one plain table, measured side by side in one
run (not a test; never fails on timing).

    python -m bench.partitions [--rows 1000000] [--partitions 100] [--changes 20000] [--rounds 3]

On a throwaway PostgreSQL and local Spark (started once; JVM start excluded) it makes two
tables with the same rows and key (bucket, id): `plain`, and `parted`, listed by bucket into
--partitions partitions. Both are attached and synced once (first copies, timed), then each
round changes --changes rows spread over every bucket in each table (the same statements,
aimed at the root) and times one ingest pass of each table alone, alternating which goes
first. A small table is synced first, untimed: a JVM's first sync pays for every code path.
It prints the median pass of each and their ratio; the goal is parted/plain <= 1.5x.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

from bench.common import throwaway
from pgcdc.settings import Settings
from pgcdc.source import capture
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--changes", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.partitions
    with throwaway("partitions") as (pg, work):
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            capture.install(conn)
            columns = "bucket int, id bigint, v int, s text, at timestamptz, primary key (bucket, id)"
            conn.execute(f"create table plain ({columns})")
            conn.execute(f"create table parted ({columns}) partition by list (bucket)")
            for b in range(n):
                conn.execute(f"create table parted_{b:03d} partition of parted for values in ({b})")
            for table in ("plain", "parted"):
                conn.execute(f"insert into {table} select i %% {n}, i, i %% 1000, md5(i::text), now() "
                             "from generate_series(1, %s) i", (args.rows,))
                capture.attach(conn, table)
            conn.execute("create table warm (id int primary key, v text)")
            conn.execute("insert into warm select i, md5(i::text) from generate_series(1, 1000) i")
            capture.attach(conn, "warm")
            conn.execute("analyze")
        spark = get_session()

        def job(table: str) -> Job:
            return Job(Settings(source={"dsn": dsn}, target={"root": str(work)}, consumer=table,
                                tables=[f"public.{table}"]), spark)

        def timed(table: str) -> float:
            began = time.perf_counter()
            run_job(job(table))
            return time.perf_counter() - began

        print(f"\n{args.rows} rows in `plain` and in `parted` ({n} partitions); ingest passes (JVM start "
              "excluded):", flush=True)
        timed("warm")  # (the first sync in a JVM pays for the first use of every code path)
        for table in ("plain", "parted"):
            print(f"  first sync of {table:6s} {timed(table):8.2f} s", flush=True)
        passes: dict[str, list[float]] = {"plain": [], "parted": []}
        step = max(1, args.rows // args.changes)
        for r in range(args.rounds):
            with psycopg.connect(dsn, autocommit=True) as conn:
                for table in ("plain", "parted"):
                    conn.execute(f"update {table} set v = v + 1, at = now() where id %% %s = %s", (step, r % step))
            order = ("plain", "parted") if r % 2 == 0 else ("parted", "plain")
            for table in order:
                passes[table].append(timed(table))
            print(f"  round {r + 1}: {args.changes} changed rows each: plain {passes['plain'][-1]:.2f} s, "
                  f"parted {passes['parted'][-1]:.2f} s", flush=True)
        plain, parted = statistics.median(passes["plain"]), statistics.median(passes["parted"])
        print(f"\nmedian pass: plain {plain:.2f} s, parted {parted:.2f} s: {parted / plain:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
