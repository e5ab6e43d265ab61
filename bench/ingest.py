"""Ingest cost, measured side by side in one run (not a test; never fails on timing).

    python -m bench.ingest [--rows 5000000] [--changes 1000000] [--small 10000] [--partitions 4]
                           [--repeat 3] [--small-rounds 10]

On a throwaway PostgreSQL and local Spark (started once; JVM start is excluded) it
times, on a table of --rows rows, both engines (docs/engines.md) on the same table, each
run by one long-lived Job as a follower's runs are (its source connections kept between runs):
  0. a first sync (pgcdc resync: the whole table copied in one snapshot) against a plain
     Spark JDBC read of the table plus a Delta write, in alternating order (--repeat rounds);
  1. ingest of --changes changed rows (spread over the whole table) with each engine and,
     for the same changes again, re-copied, each vs the floor: a Spark JDBC read of the
     same rows plus a Delta append of them (the order rotated each round; each UPDATE
     vacuumed and a checkpoint taken, untimed, before each contender);
  2. ingest of --small changed rows spread over the table (every file touched), and
  3. of --small changed rows among the newest ones (--small-rounds rounds each: Delta
     writes a checkpoint every 100 commits of pgcdc's tables; the recipe's own UPDATE is
     applied untimed after each round, so every timed run applies --small keys; one untimed
     warm-up round of each first: a path's first use loads its classes), each engine vs a full
     reload (JDBC read of the whole table plus a Delta overwrite) and vs the public recipe
     a user would write: a JDBC read of the changed rows plus DeltaTable.merge.
With --target s3 it then times the same on an s3a:// target on a throwaway local S3 server
(pgcdc.locals3: moto on loopback, so no network latency, unlike a real bucket), where auto
picks the merge engine:
  4. a first sync into S3 against a plain JDBC read + Delta write into S3 (alternating);
  5. --small changed rows spread over the table, applied by the merge engine into S3 and,
     for the same changes (another consumer), into the local folder.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from statistics import median

import psycopg

from bench.common import timed
from pgcdc.source import capture
from pgcdc.source.db import jdbc_options
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import resync_tables, run_job
from pgcdc.localpg import LocalPostgres
from pgcdc.locals3 import running as s3_running
from pgcdc.settings import Settings
from pgcdc.spark.session import get_session



def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4, help="JDBC partitions for every read")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the large measurements (medians)")
    ap.add_argument("--small-rounds", type=int, default=10, help="rounds of each small batch")
    ap.add_argument("--target", choices=["local", "s3"], default="local",
                    help="s3: also the merge engine into a local S3 server, beside the local figures")
    args = ap.parse_args()
    every = max(1, args.rows // args.changes)
    small_every = max(1, args.rows // args.small)

    work = Path(tempfile.mkdtemp(prefix="pgcdc-bench-ingest-"))
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-pg-")),
                       settings={"shared_buffers": "1GB", "max_wal_size": "8GB"})
    pg.start()
    stack = ExitStack()
    try:
        s3 = stack.enter_context(s3_running(work)) if args.target == "s3" else None
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
                                spark={"conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}
                                       | (s3.spark_conf() if s3 else {})})
            spark = get_session(settings.spark, target_root=s3.root("lake") if s3 else settings.target.root)
            say = lambda line: print("    " + line, flush=True)  # noqa: E731

            def job(engine: str, recopy_fraction: float = 0) -> Job:  # (long-lived, as a follower's)
                return Job(settings.model_copy(update={"ingest": settings.ingest.model_copy(
                    update={"engine": engine, "recopy_fraction": recopy_fraction})}), spark, say=say, following=True)
            fast, merge, recopy_always = job("fast"), job("merge"), job("fast", 1e-9)
            jdbc = jdbc_options(conn)
            url = jdbc.pop("url")
            props = jdbc | {"fetchsize": "10000"}

            def jdbc_read(where: str):
                return spark.read.jdbc(url, f"(select * from bench where {where}) q", column="id", lowerBound=1,
                                       upperBound=args.rows, numPartitions=args.partitions, properties=props)

            def plain_copy() -> None:
                jdbc_read("true").write.format("delta").mode("overwrite").save(str(work / "plain"))

            def recipe(where: str) -> None:  # what a user would write with public API alone
                from delta.tables import DeltaTable

                (DeltaTable.forPath(spark, str(work / "plain")).alias("t").merge(jdbc_read(where).alias("s"),
                                                                                  "t.id = s.id")
                 .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

            print(f"\n[0] first sync: copy {args.rows} rows, alternating with a plain copy", flush=True)
            timed("first sync (pgcdc ingest: creates the table)", (lambda: run_job(fast)))
            first, plain = [], []
            for r in range(args.repeat):
                pair = [(first, "first sync again (pgcdc resync)", lambda: resync_tables(fast, ["public.bench"])),
                        (plain, "plain copy: JDBC read of the table + Delta write", plain_copy)]
                for into, label, fn in (pair if r % 2 == 0 else pair[::-1]):
                    into.append(timed(label, fn))

            print(f"\n[1] {args.changes} changed rows (every {every}th row), {args.repeat} rounds, the order "
                  "rotated", flush=True)
            big: dict[str, list[float]] = {"floor": [], "fast": [], "merge": []}

            def settle(change: bool) -> None:
                """Each contender starts from the same state: its changes made and vacuumed (else
                autovacuum, due after a 1M-row UPDATE, runs beside whichever comes next), and a
                checkpoint (else one falls due in the middle of one of them)."""
                if change:
                    conn.execute("update bench set a = a + 1 where id %% %s = 0", (every,))
                    conn.execute("vacuum bench")
                conn.execute("checkpoint")

            contenders = [("floor", "floor: JDBC read of the same rows + Delta append",
                           lambda: jdbc_read(f"id % {every} = 0").write.format("delta").mode("append")
                           .save(str(work / "floor"))),
                          ("fast", "pgcdc ingest, fast engine", (lambda: run_job(fast))),
                          ("merge", "pgcdc ingest, merge engine", (lambda: run_job(merge)))]
            for r in range(args.repeat):
                for name, label, fn in contenders[r % 3:] + contenders[:r % 3]:
                    settle(change=name != "floor")
                    big[name].append(timed(label, fn))
            floor, big_fast, big_merge = big["floor"], big["fast"], big["merge"]
            settle(change=True)
            big_recopy = timed("pgcdc ingest, the same changes again, by re-copying the table", (lambda: run_job(recopy_always)))

            small: dict[str, dict[str, list[float]]] = {}
            for part, what, where in [
                    ("2", f"{args.small} changed rows (every {small_every}th row: every file touched)",
                     lambda r: f"id % {small_every} = {r % small_every}"),
                    ("3", f"{args.small} changed rows among the newest (ids above {args.rows - args.small})",
                     lambda r: f"id > {args.rows - args.small}")]:
                print(f"\n[{part}] {what}, {args.small_rounds} rounds of each", flush=True)
                times: dict[str, list[float]] = {"fast": [], "merge": [], "recipe": []}
                for r in range(-1, args.small_rounds):  # (round -1: untimed, each path's first use)
                    for name, fn in (("fast", (lambda: run_job(fast))), ("merge", (lambda: run_job(merge))),
                                     ("recipe", lambda: recipe(where(r)))):
                        conn.execute(f"update bench set a = a + 1 where {where(r)}")
                        label = "public recipe: JDBC read + DeltaTable.merge" if name == "recipe" else \
                            f"pgcdc ingest, {name} engine"
                        took = timed(label + (" (warm-up, untimed)" if r < 0 else ""), fn)
                        if r >= 0:
                            times[name].append(took)
                    # the recipe's UPDATE queued events too: applied here, untimed, so each timed
                    # run of an engine applies exactly its own --small changed rows
                    run_job(fast)
                small[part] = times
            reload = [timed("full reload: JDBC read of the whole table + Delta overwrite",
                            lambda: jdbc_read("true").write.format("delta").mode("overwrite")
                            .save(str(work / "reload"))) for _ in range(args.repeat)]
            remote = s3_rounds(args, conn, settings, spark, s3, jdbc_read, merge, say) if s3 else None
            for each in (fast, merge, recopy_always):
                each.close()
        print(f"\nresults ({args.rows} rows, {args.partitions} JDBC partitions, local[2]; medians of the "
              "--repeat rounds, means of the small ones; checkpoints included):")
        print(f"  first sync / plain copy                          = {median(first) / median(plain):5.2f}x  "
              f"({median(first):.1f}s / {median(plain):.1f}s; goal <= 1.2x)")
        print(f"  {args.changes} spread changes: fast / floor          = {median(big_fast) / median(floor):5.2f}x  "
              f"({median(big_fast):.1f}s / {median(floor):.1f}s; goal <= 1.3x)")
        print(f"  {args.changes} spread changes: merge / floor         = {median(big_merge) / median(floor):5.2f}x  "
              f"({median(big_merge):.1f}s)")
        print(f"  {args.changes} spread changes: re-copied / floor     = {big_recopy / median(floor):5.2f}x")
        for part, name in (("2", "spread"), ("3", "recent")):
            t = small[part]
            print(f"  {args.small} {name}: full reload / fast engine      = {median(reload) / mean(t['fast']):5.2f}x  "
                  f"({median(reload):.1f}s / {mean(t['fast']):.2f}s; goal >= 30x)")
            print(f"  {args.small} {name}: merge engine / fast engine     = {mean(t['merge']) / mean(t['fast']):5.2f}x  "
                  f"({mean(t['merge']):.2f}s; goal <= 2x)")
            print(f"  {args.small} {name}: public recipe / merge engine   = {mean(t['recipe']) / mean(t['merge']):5.2f}x  "
                  f"({mean(t['recipe']):.2f}s; goal >= 3x)")
        if remote is not None:
            print(f"  on S3 (local server, no network latency): first sync / plain copy into S3 = "
                  f"{mean(remote['first']) / mean(remote['plain']):5.2f}x ({mean(remote['first']):.1f}s / "
                  f"{mean(remote['plain']):.1f}s)")
            print(f"  {args.small} spread: merge engine into S3 / into the local folder = "
                  f"{mean(remote['s3']) / mean(remote['local']):5.2f}x ({mean(remote['s3']):.2f}s / "
                  f"{mean(remote['local']):.2f}s)")
        spark.stop()
    finally:
        stack.close()
        pg.stop(remove=True)
        shutil.rmtree(work, ignore_errors=True)


def s3_rounds(args, conn, settings, spark, s3, jdbc_read, local_merge, say) -> dict[str, list[float]]:
    """Sections 4 and 5 (see the module docstring): the merge engine into S3."""
    on_s3 = Job(settings.model_copy(update={"consumer": "bench_s3", "target": settings.target.model_copy(
        update={"root": s3.root("lake")})}), spark, say=say)
    plain_path = s3.root("plain")
    print(f"\n[4] first sync into S3 ({s3.endpoint}), alternating with a plain copy into S3", flush=True)
    timed("first sync into S3 (pgcdc ingest: creates the table)", (lambda: run_job(on_s3)))
    out: dict[str, list[float]] = {"first": [], "plain": [], "s3": [], "local": []}
    for r in range(args.repeat):
        pair = [("first", "first sync into S3 again (pgcdc resync)", lambda: resync_tables(on_s3, ["public.bench"])),
                ("plain", "plain copy into S3: JDBC read + Delta write",
                 lambda: jdbc_read("true").write.format("delta").mode("overwrite").save(plain_path))]
        for into, label, fn in (pair if r % 2 == 0 else pair[::-1]):
            out[into].append(timed(label, fn))
    every = max(1, args.rows // args.small)
    run_job(local_merge)  # (both consumers start level)
    print(f"\n[5] {args.small} changed rows (every {every}th row), merge engine: S3 and local, "
          f"{args.small_rounds} rounds", flush=True)
    for r in range(args.small_rounds):
        conn.execute(f"update bench set a = a + 1 where id % {every} = {1 + r % every}")
        out["s3"].append(timed("pgcdc ingest into S3, merge engine", (lambda: run_job(on_s3))))
        out["local"].append(timed("pgcdc ingest into the local folder, merge engine", local_merge.run))
    return out


if __name__ == "__main__":
    main()
