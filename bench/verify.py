"""`pgcdc verify` on a large table, measured (not a test; never fails on timing).

    python -m bench.verify [--rows 1000000] [--differ 10]

Loads --rows rows (bigint key, int, text, numeric, timestamptz, date), syncs them with
`pgcdc ingest`, then times side by side in one run:

- verify (pgcdc/checks/verify.py): canonical text per value on each side, hashes per key bucket,
  rows compared only in buckets that differ; once with the tables equal, once with
  --differ rows changed in PostgreSQL behind the sync's back (capture disabled);
- the row-by-row comparison pgcdc verify used before: the whole table read over JDBC with
  the sync's own mapping, then `exceptAll` both ways against Delta.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from bench.common import throwaway
from pgcdc.source import capture, enrich
from pgcdc.checks import verify
from pgcdc.sync import ingest
from pgcdc.source.columns import table_columns
from pgcdc.lake.paths import target_path
from pgcdc.source.db import jdbc_options
from pgcdc.settings import Settings
from pgcdc.spark.session import get_session


def exceptall(spark, conn: psycopg.Connection, t, path: str) -> tuple[int, int]:
    """The previous method: every row over JDBC (the sync's mapping), exceptAll both ways."""
    columns = table_columns(conn, t.name)
    pg = enrich.read_table(spark, jdbc_options(conn), t, columns, 1, 1).cache()
    delta = spark.read.format("delta").load(path)
    try:
        pg.count()
        return pg.exceptAll(delta).count(), delta.exceptAll(pg).count()
    finally:
        pg.unpersist()


def timed(what: str, work):
    started = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - started
    print(f"  {what}: {seconds:.1f} s -> {result}", flush=True)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--differ", type=int, default=10)
    args = ap.parse_args()

    with throwaway("verify", settings={"shared_buffers": "1GB"}) as (pg, work):
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            print(f"loading {args.rows} rows ...", flush=True)
            conn.execute("create table bench (id bigint primary key, a int not null, b text not null, "
                         "c numeric(12,2), d timestamptz not null default now(), e date)")
            conn.execute("insert into bench (id, a, b, c, e) select i, i %% 1000, md5(i::text), (i %% 100000) / 100.0, "
                         "date '2000-01-01' + i %% 10000 from generate_series(1, %s) i", (args.rows,))
            conn.execute("vacuum analyze bench")
            capture.install(conn)
            capture.attach(conn, "bench")
            settings = Settings(source={"dsn": pg.dsn()}, target={"root": str(work / "lake")}, consumer="bench",
                                spark={"conf": {"spark.driver.memory": "4g"}})
            spark = get_session(settings.spark, target_root=settings.target.root)
            ingest.run(settings, spark, say=lambda line: None)
            (t,) = capture.list_attached(conn)
            path = target_path(settings.target.root, t.name)

            for _ in range(2):  # (the first round warms Spark and the caches)
                print("equal tables:", flush=True)
                new = timed("verify", lambda: verify.compare(spark, conn, t, path).line())
                old = timed("JDBC read + exceptAll (before)", lambda: exceptall(spark, conn, t, path))
            print(f"  ratio: verify takes {new / old:.2f}x the time of the previous method")

            conn.execute("alter table bench disable trigger user")  # changes the sync does not see
            conn.execute("update bench set a = a + 1 where id %% (%s::bigint / %s) = 0", (args.rows, args.differ))
            conn.execute("alter table bench enable trigger user")
            print(f"{args.differ} rows differ:", flush=True)
            new = timed("verify", lambda: verify.compare(spark, conn, t, path).line())
            old = timed("JDBC read + exceptAll (before)", lambda: exceptall(spark, conn, t, path))
            print(f"  ratio: verify takes {new / old:.2f}x the time of the previous method")


if __name__ == "__main__":
    main()
