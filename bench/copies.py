"""Copies of big tables, measured side by side in one run (not a test; never fails on timing).

    python -m bench.copies [--rows 5000000] [--big-rows 20000000] [--wide-rows 1000000]
                           [--chunk-rows 1000000] [--chunk-seconds 5] [--repeat 2]

On a throwaway PostgreSQL and local Spark (JVM start excluded):
  1. a first sync of --rows narrow rows (a new consumer into a new folder each time), in chunks
     (the first of --chunk-rows, the next sized to take --chunk-seconds), against a plain Spark
     JDBC read of the table plus a Delta write, and against the same first sync in one snapshot,
     in rotating order (--repeat rounds, medians);
     then a resync in chunks (each chunk replacing its range of the full table);
  2. the same copy killed half-way (at its first chunk commit past half its time) and resumed by
     the next run: both runs together, against the plain copy;
  3. a copy of --big-rows rows while a sampler reads pg_stat_activity every 0.2 s: the longest
     any session held a snapshot (now() - xact_start of a backend with a backend_xmin), against
     the copy's total time;
  4. rows/s and MB/s (pg_table_size) of the chunked copy for the narrow rows and for --wide-rows
     rows of ~1 KB.
"""

from __future__ import annotations

import argparse
import threading
import time
from statistics import median
from typing import Any, Callable

import psycopg

import pgcdc.faults
from bench.common import throwaway, timed
from pgcdc.settings import Settings
from pgcdc.source import capture
from pgcdc.source.db import jdbc_options
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import resync_tables, run_job



class _Killed(Exception):
    pass


def _load(conn: psycopg.Connection, name: str, rows: int, wide: bool = False) -> int:
    """A table of `rows` rows (narrow: ~100 bytes; wide: ~1 KB), vacuumed; its heap's bytes."""
    pad = "repeat(md5(i::text), 28)" if wide else "md5(i::text) || md5((i * 7)::text)"
    conn.execute(f"create table {name} (id bigint primary key, a int not null, b text not null, c numeric(12,2), "
                 "d timestamptz not null default now())")
    step = 2_000_000
    for lo in range(1, rows + 1, step):
        conn.execute(f"insert into {name} (id, a, b, c) select i, i % 1000, {pad}, (i % 100000) / 100.0 "
                     f"from generate_series({lo}, {min(rows, lo + step - 1)}) i")
    conn.execute(f"vacuum analyze {name}")
    capture.attach(conn, name)
    return int(conn.execute(f"select pg_table_size('{name}')").fetchone()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--big-rows", type=int, default=20_000_000)
    ap.add_argument("--wide-rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-rows", type=int, default=1_000_000, help="[copies] chunk_rows: the first chunk's")
    ap.add_argument("--chunk-seconds", type=float, default=5.0, help="[copies] chunk_seconds (0: every chunk chunk_rows)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with throwaway("copies", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            capture.install(conn)
            print(f"loading {args.rows} narrow rows ...", flush=True)
            narrow_bytes = _load(conn, "public.bench", args.rows)
            base = Settings(source={"dsn": pg.dsn()}, target={"root": str(work / "lake")}, consumer="bench",
                            ingest={"jdbc_partitions": args.partitions},
                            copies={"chunk_rows": args.chunk_rows, "chunk_seconds": args.chunk_seconds},
                            spark={"conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}})
            spark = get_session(base.spark, target_root=base.target.root)
            say = lambda line: print("    " + line, flush=True)  # noqa: E731

            fresh = [0]

            def job(chunk_rows: int, tables: list[str] | None = None, chunk_mb: int | None = None) -> Job:
                """A Job of a new consumer into a new root: its run is a first sync."""
                fresh[0] += 1
                return Job(base.model_copy(update={
                    "consumer": f"bench{fresh[0]}", "target": base.target.model_copy(
                        update={"root": str(work / f"lake{fresh[0]}")}),
                    "tables": tables or ["public.bench"],
                    "copies": base.copies.model_copy(update={"chunk_rows": chunk_rows,
                                                             "chunk_mb": chunk_mb or base.copies.chunk_mb})}),
                    spark, say=say)
            jdbc = jdbc_options(conn)
            url = jdbc.pop("url")
            props = jdbc | {"fetchsize": "10000"}

            def plain_copy(table: str, rows: int) -> None:
                (spark.read.jdbc(url, f"(select * from {table}) q", column="id", lowerBound=1, upperBound=rows,
                                 numPartitions=args.partitions, properties=props)
                 .write.format("delta").mode("overwrite").save(str(work / f"plain-{table}")))

            print(f"\n[1] first sync of {args.rows} rows: in chunks of {args.chunk_rows}, in one snapshot, plain copy",
                  flush=True)
            timed("a first sync (untimed warm-up: code paths used the first time)",
                  lambda: run_job(job(args.chunk_rows)))
            got: dict[str, list[float]] = {"chunks": [], "whole": [], "plain": []}
            contenders: list[tuple[str, str, Callable[[], Any]]] = [
                ("chunks", "first sync in chunks (a new consumer)", lambda: run_job(job(args.chunk_rows))),
                ("whole", "first sync in one snapshot (chunks bigger than the table)",
                 lambda: run_job(job(10 ** 12, chunk_mb=10 ** 6))),
                ("plain", "plain copy: JDBC read of the table + Delta write", lambda: plain_copy("bench", args.rows))]
            for r in range(args.repeat):
                for key, label, fn in contenders[r % 3:] + contenders[:r % 3]:
                    got[key].append(timed(label, fn))
            resync = timed("resync in chunks (every chunk replaces its range of a full table)",
                           lambda: resync_tables(job(args.chunk_rows), ["public.bench"]))

            print("\n[2] the copy in chunks killed at the first chunk commit past half its time, then resumed",
                  flush=True)
            half, began = median(got["chunks"]) / 2, [0.0]
            real = pgcdc.faults.failpoint

            def kill(name: str) -> None:
                if name == "after-chunk-commit" and time.monotonic() - began[0] >= half:
                    raise _Killed(name)

            resumable = job(args.chunk_rows)

            def killed() -> None:
                pgcdc.faults.failpoint, began[0] = kill, time.monotonic()
                try:
                    run_job(resumable)
                except _Killed:
                    pass
                finally:
                    pgcdc.faults.failpoint = real
            first = timed(f"first sync killed at its first chunk commit after {half:.1f} s", killed)
            second = timed("the next run resumes it", lambda: run_job(resumable))
            resumed = first + second

            print(f"\n[3] a copy of {args.big_rows} rows, pg_stat_activity sampled every 0.2 s", flush=True)
            print(f"loading {args.big_rows} rows ...", flush=True)
            _load(conn, "public.big", args.big_rows)
            longest = [0.0]
            done = threading.Event()

            def sample() -> None:
                with psycopg.connect(pg.dsn(), autocommit=True) as watcher:
                    while not done.is_set():
                        held = watcher.execute(
                            "select coalesce(extract(epoch from max(clock_timestamp() - xact_start)), 0) "
                            "from pg_stat_activity where backend_xmin is not null and pid <> pg_backend_pid()"
                        ).fetchone()[0]
                        longest[0] = max(longest[0], float(held))
                        time.sleep(0.2)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            big_job = job(args.chunk_rows, ["public.big"])
            big = timed("first sync in chunks", (lambda: run_job(big_job)))
            done.set()
            sampler.join()

            print(f"\n[4] {args.wide_rows} rows of ~1 KB", flush=True)
            wide_bytes = _load(conn, "public.wide", args.wide_rows, wide=True)
            wide_job = job(args.chunk_rows, ["public.wide"])
            wide = timed("first sync in chunks", (lambda: run_job(wide_job)))

        c, w, p = median(got["chunks"]), median(got["whole"]), median(got["plain"])
        narrow = c
        print("\nresults (medians):")
        print(f"  first sync in chunks / plain copy               = {c / p:5.2f}x  ({c:.1f}s / {p:.1f}s; goal <= 1.2x)")
        print(f"  first sync in one snapshot / plain copy         = {w / p:5.2f}x  ({w:.1f}s)")
        print(f"  resync in chunks / plain copy                   = {resync / p:5.2f}x  ({resync:.1f}s)")
        print(f"  killed half-way + resumed / plain copy          = {resumed / p:5.2f}x  ({first:.1f}s + "
              f"{second:.1f}s; goal <= 1.35x)")
        print(f"  {args.big_rows} rows: longest snapshot held {longest[0]:.1f}s of the copy's {big:.1f}s "
              f"({longest[0] / big:.0%})")
        print(f"  narrow rows: {args.rows / narrow:,.0f} rows/s, {narrow_bytes / narrow / 2**20:.1f} MB/s "
              f"({narrow_bytes / args.rows:.0f} bytes a row)")
        print(f"  ~1 KB rows: {args.wide_rows / wide:,.0f} rows/s, {wide_bytes / wide / 2**20:.1f} MB/s "
              f"({wide_bytes / args.wide_rows:.0f} bytes a row)")


if __name__ == "__main__":
    main()
