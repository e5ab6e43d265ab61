"""Ingest cost, measured side by side in one run (not a test; never fails on timing).

    python -m bench.ingest [--rows 5000000] [--changes 1000000] [--small 10000] [--partitions 4]
                           [--repeat 2] [--small-rounds 10]

On a throwaway PostgreSQL and local Spark (started once; JVM start is excluded) it
times, on a table of --rows rows:
  1. ingest of --changes changed rows (spread over the whole table), applied (--repeat
     rounds) and, for the same changes again, re-copied, each vs the floor: a Spark JDBC
     read of the same rows plus a Delta append of them;
  2. ingest of --small changed rows spread over the table (every file touched), and
  3. of --small changed rows among the newest ones (--small-rounds rounds each: Delta
     writes a checkpoint every 10 commits, and its cost belongs in the mean), each vs a
     full reload: JDBC read of the whole table plus a Delta overwrite.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import psycopg

from pgcdc import capture
from pgcdc.db import jdbc_options
from pgcdc.ingest import Job
from pgcdc.localpg import LocalPostgres
from pgcdc.settings import Settings
from pgcdc.spark import get_session


def timed(label: str, fn) -> float:
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    print(f"  {label:58s} {took:8.2f}s", flush=True)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4, help="JDBC partitions for every read")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of the large measurements")
    ap.add_argument("--small-rounds", type=int, default=10, help="rounds of each small batch (10: one checkpoint)")
    args = ap.parse_args()
    every = max(1, args.rows // args.changes)
    small_every = max(1, args.rows // args.small)

    work = Path(tempfile.mkdtemp(prefix="pgcdc-bench-ingest-"))
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-pg-")),
                       settings={"shared_buffers": "1GB", "max_wal_size": "8GB"})
    pg.start()
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            print(f"loading {args.rows} rows ...", flush=True)
            conn.execute("create table bench (id bigint primary key, a int not null, b text not null, "
                         "c numeric(12,2), d timestamptz not null default now())")
            conn.execute("insert into bench (id, a, b, c) select i, i %% 1000, md5(i::text) || md5((i * 7)::text), "
                         "(i %% 100000) / 100.0 from generate_series(1, %s) i", (args.rows,))
            conn.execute("vacuum analyze bench")
            capture.install(conn)
            capture.attach(conn, "bench")

            lake = work / "lake"
            settings = Settings(source={"dsn": pg.dsn()}, target={"root": str(lake)}, consumer="bench",
                                ingest={"jdbc_partitions": args.partitions, "max_keys_per_batch": 10_000_000,
                                        "max_events_per_batch": 100_000},
                                spark={"conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}})
            spark = get_session(settings.spark)
            say = lambda line: print("    " + line, flush=True)  # noqa: E731
            job = Job(settings, spark, say=say)

            def forced(recopy_fraction: float) -> Job:
                return Job(settings.model_copy(update={"ingest": settings.ingest.model_copy(
                    update={"recopy_fraction": recopy_fraction})}), spark, say=say)
            apply_only, recopy_always = forced(0), forced(1e-9)
            jdbc = jdbc_options(conn)
            url = jdbc.pop("url")
            props = jdbc | {"fetchsize": "10000"}

            def jdbc_read(where: str):
                return spark.read.jdbc(url, f"(select * from bench where {where}) q", column="id", lowerBound=1,
                                       upperBound=args.rows, numPartitions=args.partitions, properties=props)

            print(f"\n[first sync: copy {args.rows} rows]", flush=True)
            timed("first sync (pgcdc ingest)", job.run)

            print(f"\n[1] {args.changes} changed rows (every {every}th row), {args.repeat} rounds", flush=True)
            floor, ingest_apply = [], []
            for r in range(args.repeat):
                floor.append(timed("floor: JDBC read of the same rows + Delta append",
                                   lambda: jdbc_read(f"id % {every} = 0").write.format("delta").mode("append")
                                   .save(str(work / "floor"))))
                conn.execute("update bench set a = a + 1 where id %% %s = 0", (every,))
                ingest_apply.append(timed("pgcdc ingest, applied (deletion vectors + new files)", apply_only.run))
            conn.execute("update bench set a = a + 1 where id %% %s = 0", (every,))
            ingest_recopy = timed("pgcdc ingest, the same changes again, by re-copying the table", recopy_always.run)

            print(f"\n[2] {args.small} changed rows (every {small_every}th row: worst case, every file touched), "
                  f"{args.small_rounds} rounds", flush=True)
            ingest_spread = []
            for r in range(args.small_rounds):
                conn.execute("update bench set a = a + 1 where id %% %s = %s", (small_every, 1 + r % small_every))
                ingest_spread.append(timed("pgcdc ingest", job.run))
            print(f"\n[3] {args.small} changed rows among the newest (ids above {args.rows - args.small}), "
                  f"{args.small_rounds} rounds", flush=True)
            ingest_recent = []
            for r in range(args.small_rounds):
                conn.execute("update bench set a = a + 1 where id > %s", (args.rows - args.small,))
                ingest_recent.append(timed("pgcdc ingest", job.run))
            reload = [timed("full reload: JDBC read of the whole table + Delta overwrite",
                            lambda: jdbc_read("true").write.format("delta").mode("overwrite")
                            .save(str(work / "reload"))) for _ in range(args.repeat)]
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        print(f"\nresults ({args.rows} rows, {args.partitions} JDBC partitions, local[2]; means over the rounds, "
              "checkpoints included):")
        print(f"  floor {mean(floor):.1f}s, applied {mean(ingest_apply):.1f}s, re-copied {ingest_recopy:.1f}s, "
              f"{args.small} spread {mean(ingest_spread):.2f}s, {args.small} recent {mean(ingest_recent):.2f}s, "
              f"reload {mean(reload):.1f}s")
        print(f"  ingest of {args.changes} spread changes, applied / floor  = {mean(ingest_apply) / mean(floor):5.2f}x  "
              "(target <= 1.5x)")
        print(f"  the same, re-copied / floor                       = {ingest_recopy / mean(floor):5.2f}x")
        print(f"  full reload / ingest of {args.small} spread changes    = {mean(reload) / mean(ingest_spread):5.2f}x  "
              "(target >= 20x)")
        if len(ingest_spread) > 1:  # the first spread batch also makes the copied files' key index (key_index.py)
            print(f"    (first round {ingest_spread[0]:.2f}s, the others {mean(ingest_spread[1:]):.2f}s: "
                  f"{mean(reload) / mean(ingest_spread[1:]):5.2f}x)")
        print(f"  full reload / ingest of {args.small} recent-row changes = {mean(reload) / mean(ingest_recent):5.2f}x  "
              "(target >= 20x)")
        spark.stop()
    finally:
        pg.stop(remove=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
