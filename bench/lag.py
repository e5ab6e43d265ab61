"""End-to-end lag of `pgcdc ingest --follow`, and what the follower costs (not a test; never fails).

    python -m bench.lag [--minutes 3] [--rate 1000] [--tables 10] [--rows 10000] [--engine auto] [--no-cuts]

On a throwaway PostgreSQL and a local Delta folder: one writer thread per table commits
transactions of 10 changed rows at a steady total of --rate changed rows per second; each
transaction stamps its rows with the table's next sequence number and notes the time its
commit returned. A follower (`pgcdc ingest --follow`, its own process and JVM) syncs the
tables. A separate reader process watches every table's Delta log for its next commit and
notes when each sequence number first became readable (from the commit's files' statistics,
checked against delta-rs now and then: reader_main).
Lag = that moment - the commit's return, for every transaction after a warm-up.

It prints p50/p90/p99/max lag, the follower's CPU (its Python and its JVM, from /proc) as
cores used beside the reader's and the rest of the machine's (the writers, PostgreSQL), its
runs' (passes') median time, and its resident memory (RSS of both) sampled every --rss-every seconds, so a
long run (--minutes 120) shows whether memory stays flat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from pgcdc.source import capture
from pgcdc.localpg import LocalPostgres

ROWS_PER_TX = 10


def reader_main(root: str, tables: list[str], out: str) -> None:
    """The separate reader: for each table, the highest sequence number readable now. It watches
    each table's Delta log for its next commit file (Delta publishes a version by creating it,
    atomically) and takes the highest `seq` of the rows that commit added from their files'
    statistics, which is what any reader of that version sees (delta-rs reads a table whose
    commits carry none, and checks the statistics' answer on every 50th version). A reader that
    queried every table with delta-rs after every commit took ~0.7 cores and ~60,000 context
    switches a second of this 2-core machine at 200 tables: it stands for readers elsewhere."""
    from deltalake import DeltaTable, QueryBuilder

    def queried(t: str) -> int:
        dt = DeltaTable(f"{root}/public.{t}")
        batch = QueryBuilder().register("t", dt).execute("select max(seq) as m from t").read_all()
        return int(batch.column("m")[0].as_py() or 0)

    versions: dict[str, int] = {}
    seen: dict[str, int] = {}
    with open(out, "w") as f:
        while True:
            for t in tables:
                log = Path(f"{root}/public.{t}/_delta_log")
                version = versions.get(t, -1) + 1
                try:
                    text = (log / f"{version:020d}.json").read_text()
                except OSError:
                    if version == 0 and log.is_dir():  # (a log cleaned up to a checkpoint: start past it)
                        versions[t] = max((int(p.name[:20]) for p in log.glob("*.json")), default=0) - 1
                    continue
                at = time.time()
                versions[t] = version
                tops = [json.loads(json.loads(line)["add"].get("stats") or "{}").get("maxValues", {}).get("seq")
                        for line in text.splitlines() if line.startswith('{"add"')]
                try:
                    top = queried(t) if None in tops or version % 50 == 0 else max(tops, default=-1)
                except Exception:  # (not readable yet)
                    continue
                if version % 50 == 0 and None not in tops and tops and max(tops) > top:
                    raise SystemExit(f"{t} version {version}: its files' statistics say seq {max(tops)}, "
                                     f"delta-rs reads {top}")
                if top > seen.get(t, -1):
                    seen[t] = top
                    f.write(f"{t} {top} {at:.4f}\n")
                    f.flush()
            time.sleep(0.02)


def process_group(leader: int) -> list[int]:
    """The pids of the follower's session (its Python and the JVM it starts)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == leader:  # session id
                pids.append(int(entry))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def machine_cpu_seconds() -> float:
    """CPU seconds every process on the machine used so far (/proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def rss_mib(pids: list[int]) -> tuple[float, float]:
    """(Python's RSS, the JVM's RSS) in MiB."""
    python = jvm = 0.0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        rss = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0.0)
        if b"java" in cmd.split(b"\0")[0]:
            jvm += rss
        elif b"python" in cmd.split(b"\0")[0]:
            python += rss
    return python, jvm


class Writer(threading.Thread):
    """One table's writer: transactions of ROWS_PER_TX rows at `tx_per_s`, each stamped with a sequence number."""

    def __init__(self, dsn: str, table: str, rows: int, tx_per_s: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table, self.rows, self.period, self.stop = dsn, table, rows, 1.0 / tx_per_s, stop
        self.commits: dict[int, float] = {}
        self.rng = random.Random(table)

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            seq, next_at = 0, time.monotonic()
            while not self.stop.is_set():
                seq += 1
                ids = self.rng.sample(range(1, self.rows + 1), ROWS_PER_TX)
                with conn.transaction():
                    conn.execute(f"update {self.table} set seq = %s, v = v + 1 where id = any(%s)", (seq, ids))
                self.commits[seq] = time.time()
                next_at += self.period
                time.sleep(max(0.0, next_at - time.monotonic()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=3.0, help="measured time after the warm-up")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds before measuring (first copies, JIT)")
    ap.add_argument("--rate", type=float, default=1000.0, help="changed rows per second over all tables")
    ap.add_argument("--tables", type=int, default=10)
    ap.add_argument("--rows", type=int, default=10_000, help="rows per table")
    ap.add_argument("--engine", default="auto", choices=["auto", "merge", "fast"])
    ap.add_argument("--parallel", type=int, default=1, help="the follower's [ingest] parallel_tables")
    ap.add_argument("--interval", type=float, default=0.2, help="the follower's --interval")
    ap.add_argument("--rss-every", type=float, default=30.0, help="seconds between memory samples")
    ap.add_argument("--compact-files", type=int, default=None,
                    help="the follower's [ingest] compact_files (default: pgcdc's; 0 = never compact)")
    ap.add_argument("--durable", action="store_true", help="fsync on in PostgreSQL (default off, as in the tests)")
    ap.add_argument("--no-cuts", action="store_true", help="the follower's [ingest] cuts = false (passes read rows as "
                    "they are, not as of one snapshot: docs/readers.md)")
    ap.add_argument("--watch-every", type=float, default=0.0, help="also measure with the follower's watch on "
                    "([watch] every = this, sync/watch.py), one after the other in this run, and print the ratio")
    args = ap.parse_args()
    runs = [_measure(args, 0.0)] + ([_measure(args, args.watch_every)] if args.watch_every > 0 else [])
    if len(runs) == 2:
        (p50, p99, cpu), (wp50, wp99, wcpu) = runs
        print(f"\nwith the watch ([watch] every = {args.watch_every:g} s, ranges 16) against without: lag p50 "
              f"{wp50:.2f} s vs {p50:.2f} s ({wp50 / p50:.2f}x), p99 {wp99:.2f} s vs {p99:.2f} s ({wp99 / p99:.2f}x), "
              f"follower CPU {wcpu:.2f} vs {cpu:.2f} cores")


def _measure(args: argparse.Namespace, watch_every: float) -> tuple[float, float, float]:
    """One follower measured (see the module docstring): (lag p50, lag p99, its CPU in cores)."""
    work = Path(tempfile.mkdtemp(prefix="pgcdc-bench-lag-"))
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-pg-")), durable=args.durable,
                       settings={"shared_buffers": "512MB",  # (a writer connection per table)
                                 "max_connections": str(max(100, args.tables + 50))})
    pg.start()
    tables = [f"t{i}" for i in range(args.tables)]
    stop = threading.Event()
    follower = reader = None
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            capture.install(conn)
            for t in tables:
                conn.execute(f"create table {t} (id int primary key, seq bigint not null default 0, v int not null "
                             "default 0, pad text not null default repeat('x', 80))")
                conn.execute(f"insert into {t} (id) select generate_series(1, %s)", (args.rows,))
                capture.attach(conn, t)
        lake = work / "lake"
        cfg = work / "pgcdc.toml"
        cfg.write_text(f'consumer = "lag"\n[source]\ndsn = "{pg.dsn()}"\n[target]\nroot = "{lake}"\n'
                       f'[ingest]\nengine = "{args.engine}"\nparallel_tables = {args.parallel}\n'
                       f'cuts = {"false" if args.no_cuts else "true"}\n'
                       + (f"compact_files = {args.compact_files}\n" if args.compact_files is not None else "")
                       + (f"[watch]\nevery = {watch_every}\n" if watch_every > 0 else ""))
        log = open(work / "follower.log", "w")
        follower = subprocess.Popen([sys.executable, "-m", "pgcdc", "--config", str(cfg), "--log-format", "json",
                                     "ingest", "--follow", "--interval", str(args.interval)],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        seen_file = work / "seen.txt"
        reader = subprocess.Popen([sys.executable, "-m", "bench.lag", "--reader", str(lake), ",".join(tables),
                                   str(seen_file)], start_new_session=True)
        writers = [Writer(pg.dsn(), t, args.rows, args.rate / ROWS_PER_TX / args.tables, stop) for t in tables]
        for w in writers:
            w.start()
        print(f"{'watch every ' + str(watch_every) + ' s; ' if watch_every else ''}"
              f"{args.tables} tables x {args.rows} rows; {args.rate:.0f} changed rows/s in transactions of "
              f"{ROWS_PER_TX}; engine {args.engine}; cuts {'off' if args.no_cuts else 'on'}; "
              f"follower --interval {args.interval}; warm-up {args.warmup:.0f} s, "
              f"then {args.minutes:g} min measured; work dir {work}", flush=True)
        time.sleep(args.warmup)
        measure_from = time.time()
        pids = process_group(follower.pid)
        cpu0, t0 = cpu_seconds(pids), time.monotonic()
        reader0, machine0 = cpu_seconds(process_group(reader.pid)), machine_cpu_seconds()
        samples = []
        end = time.monotonic() + 60 * args.minutes
        while time.monotonic() < end:
            time.sleep(min(args.rss_every, max(0.0, end - time.monotonic())))
            pids = process_group(follower.pid)
            py, jvm = rss_mib(pids)
            samples.append((time.monotonic() - t0, py, jvm))
            print(f"  t+{samples[-1][0]:6.0f} s  RSS python {py:6.0f} MiB  jvm {jvm:6.0f} MiB", flush=True)
            if follower.poll() is not None:
                raise SystemExit(f"the follower exited {follower.returncode}; see {work / 'follower.log'}")
        spent = time.monotonic() - t0
        cpu = (cpu_seconds(process_group(follower.pid)) - cpu0) / spent
        reader_cpu = (cpu_seconds(process_group(reader.pid)) - reader0) / spent
        machine = (machine_cpu_seconds() - machine0) / spent
        measure_to = time.time()
        stop.set()
        for w in writers:
            w.join()
        time.sleep(10)  # the last commits reach Delta
    finally:
        stop.set()
        for proc in (reader, follower):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        pg.stop(remove=True)

    seen: dict[str, list[tuple[int, float]]] = {t: [] for t in tables}
    for line in seen_file.read_text().splitlines():
        t, top, at = line.split()
        seen[t].append((int(top), float(at)))
    timed: list[tuple[float, float]] = []  # (commit time, lag)
    unseen = 0
    for w in writers:
        marks = seen[w.table]
        for seq, committed in w.commits.items():
            if not measure_from <= committed <= measure_to:
                continue
            first = next((at for top, at in marks if top >= seq), None)
            if first is None:
                unseen += 1
            else:
                timed.append((committed, first - committed))
    lags = sorted(lag for _, lag in timed)

    def pct(p: float) -> float:
        return lags[min(len(lags) - 1, int(p / 100 * len(lags)))]

    batches = [json.loads(line) for line in (work / "follower.log").read_text().splitlines()
               if line.startswith("{") and '"record": "batch"' in line]
    print(f"\nlag from commit to readable in Delta (the log reader), {len(lags)} transactions "
          f"({len(lags) * ROWS_PER_TX / (measure_to - measure_from):.0f} changed rows/s measured), {unseen} never seen:")
    print(f"  p50 {pct(50):.2f} s   p90 {pct(90):.2f} s   p99 {pct(99):.2f} s   max {lags[-1]:.2f} s   "
          f"mean {statistics.mean(lags):.2f} s")
    runs = [json.loads(line)["seconds"] for line in (work / "follower.log").read_text().splitlines()
            if line.startswith("{") and '"record": "run"' in line]
    print(f"follower CPU: {cpu:.2f} cores (Python + JVM) of {os.cpu_count()}; the reader {reader_cpu:.2f}, "
          f"the rest (writers, PostgreSQL, ...) {machine - cpu - reader_cpu:.2f}; {len(batches)} batches in the whole "
          f"run, median {statistics.median(b['seconds'] for b in batches):.3f} s each; {len(runs)} runs (passes), "
          f"median {statistics.median(runs) if runs else float('nan'):.2f} s each")
    _print_windows(timed, batches, measure_from, measure_to)
    if samples:
        print(f"follower RSS: python {samples[0][1]:.0f} -> {samples[-1][1]:.0f} MiB (max {max(s[1] for s in samples):.0f}), "
              f"jvm {samples[0][2]:.0f} -> {samples[-1][2]:.0f} MiB (max {max(s[2] for s in samples):.0f}) "
              f"over {samples[-1][0] / 60:.1f} min")
    return pct(50), pct(99), cpu


def _print_windows(lags: list[tuple[float, float]], batches: list[dict], start: float, end: float) -> None:
    """Lag and batch time by stretch of the run (up to 4 stretches of at least 5 minutes): a
    follower whose batches slow down as its tables age shows here, not in the whole run's figures."""
    from datetime import datetime

    count = max(1, min(4, int((end - start) // 300)))
    if count == 1:
        return
    step = (end - start) / count
    print("by stretch of the measured time:")
    for i in range(count):
        lo, hi = start + i * step, start + (i + 1) * step
        part = sorted(lag for at, lag in lags if lo <= at < hi)
        took = [b["seconds"] for b in batches if lo <= datetime.fromisoformat(b["time"]).timestamp() < hi]
        if part:
            print(f"  minutes {(lo - start) / 60:5.1f}-{(hi - start) / 60:5.1f}: lag p50 {part[len(part) // 2]:.2f} s, "
                  f"p99 {part[min(len(part) - 1, int(0.99 * len(part)))]:.2f} s; "
                  f"{len(took)} batches, median {statistics.median(took) if took else float('nan'):.3f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--reader":
        reader_main(sys.argv[2], sys.argv[3].split(","), sys.argv[4])
    else:
        main()
