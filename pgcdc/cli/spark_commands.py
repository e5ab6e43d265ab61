"""The `pgcdc` commands that start Spark (ingest, compact, verify, resync, ...); the parser and
the commands that need the database only are in pgcdc/cli/main.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from pgcdc import errors
from pgcdc.cli.common import print_json as _print_json
from pgcdc.cli.common import settings_of as _settings
from pgcdc.cli.demo import run_demo
from pgcdc.cli.submit import run as submit
from pgcdc.cli.submit import submit_args
from pgcdc.source.selection import select_tables
from pgcdc.source.db import connect
from pgcdc.spark.session import get_session
from pgcdc.sync.compact import compact
from pgcdc.sync.follow import follow
from pgcdc.sync.runs import preflight, resync, run
from pgcdc.checks.adopt import adopt
from pgcdc.checks.repair import repair
from pgcdc.checks.rewind import reset_watermark
from pgcdc.checks.verify import verify


def cmd_submit_args(args: argparse.Namespace) -> int:
    """Print spark-submit's arguments (packages for target.root's storage, jars, confs, entry point)."""
    import shlex

    print(shlex.join(submit_args(_settings(args).target.root, args.job)))
    return errors.OK


def cmd_submit(args: argparse.Namespace) -> int:
    """spark-submit the ingest job with this environment's pyspark and Python."""
    return submit(_settings(args).target.root, args.config, [a for a in args.spark_args if a != "--"])


def cmd_ingest(args: argparse.Namespace) -> int:
    """Run the ingest job once (or, --follow, until stopped) with a local Spark session (or
    spark-submit's)."""
    settings = _settings(args)
    if args.follow:
        preflight(settings, settings.tables)
        return follow(settings, get_session(settings.spark, target_root=settings.target.root), args.interval,
                      args.compact_every, args.metrics_port, args.metrics_address)
    reports = run(settings)
    if reports:
        print(f"ingest done for consumer {settings.consumer}: {len(reports)} table(s) in sync up to their watermark")
    return errors.OK


def cmd_resync(args: argparse.Namespace) -> int:
    """Copy tables again from scratch."""
    reports = resync(_settings(args), args.tables)
    print(f"resynced {len(reports)} table(s); later changes follow with `pgcdc ingest`")
    return errors.OK


def cmd_reset_watermark(args: argparse.Namespace) -> int:
    """After a restore: bring every synced table to the database as it is now, by the rows Delta
    changed after the restore point (checks/rewind.py), a table copied where that cannot hold."""
    settings = _settings(args)
    done = reset_watermark(settings, say=print)
    copied = sum(1 for r in done if r.queued is None)
    print(f"reset {len(done)} table(s) of consumer {settings.consumer} to the database as it is now "
          f"({len(done) - copied} by the rows changed since the restore point, {copied} copied again); continue "
          "with `pgcdc ingest`")
    return errors.OK


def cmd_compact(args: argparse.Namespace) -> int:
    """OPTIMIZE and VACUUM the consumer's Delta tables, holding its lock."""
    settings = _settings(args)
    preflight(settings, args.tables, lock=False)
    done = compact(settings, get_session(settings.spark, target_root=settings.target.root), args.tables,
                   args.retain_hours)
    print(f"compacted {len(done)} table(s) of consumer {settings.consumer}")
    return errors.OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Compare Delta tables with PostgreSQL; exit 1 if any differs."""
    settings = _settings(args)
    with connect(settings.source.dsn) as conn:
        tables = select_tables(conn, args.tables or settings.tables)
    with connect(settings.source.dsn, reader=True) as conn:  # (row-level security off, names in pg_catalog)
        spark = get_session(settings.spark, target_root=settings.target.root)
        results = verify(spark, conn, settings.target.root, tables, settings.consumer)
    if args.json:
        from dataclasses import asdict

        internal = ("differing", "ranges")  # (the keys, and the ranges' layout kept for repair)
        _print_json([{k: v for k, v in asdict(r).items() if k not in internal} | {"equal": r.equal} for r in results])
    else:
        for r in results:
            print(r.line())
    return errors.OK if all(r.equal for r in results) else errors.ATTENTION


def cmd_repair(args: argparse.Namespace) -> int:
    """Rewrite only the rows verify finds different; exit 1 if a table still differs (or, with
    --dry-run, differs)."""
    settings = _settings(args)
    results = repair(settings, args.tables or settings.tables, args.dry_run, say=print, whole=args.whole)
    if args.dry_run:
        print("dry run: nothing queued or written")
        return errors.OK if all(r.before.equal for r in results) else errors.ATTENTION
    return errors.OK if all(r.done for r in results) else errors.ATTENTION


def cmd_adopt(args: argparse.Namespace) -> int:
    """Take over Delta tables another tool wrote, reconciled by range instead of copied."""
    settings = _settings(args)
    reports = adopt(settings, args.tables, say=print)
    print(f"adopted {len(reports)} table(s) for consumer {settings.consumer}; later changes follow with `pgcdc "
          "ingest`")
    return errors.OK


def cmd_demo(args: argparse.Namespace) -> int:

    run_demo(Path(args.lake))
    return errors.OK
