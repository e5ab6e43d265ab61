"""The `pgcdc` command: parses arguments and calls typed functions; nothing else lives here."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pgcdc import __version__, errors, log
from pgcdc.cli.common import print_json as _print_json
from pgcdc.cli.common import settings_of as _settings
from pgcdc.cli.common import source_of as _source
from pgcdc.cli.cuts import cmd_cut
from pgcdc.cli.tables import cmd_attach, cmd_detach, cmd_grant, cmd_install, cmd_list, cmd_uninstall
from pgcdc.cli.spark_commands import (
    cmd_compact,
    cmd_demo,
    cmd_ingest,
    cmd_adopt,
    cmd_repair,
    cmd_reset_watermark,
    cmd_resync,
    cmd_submit,
    cmd_submit_args,
    cmd_verify,
)
from pgcdc.errors import PgcdcError, SourceError
from pgcdc.lake import shards
from pgcdc.lake.paths import check_target_root
from pgcdc.settings import describe, masked_dsn
from pgcdc.source import access, capture, consumers
from pgcdc.source.db import connect, server
from pgcdc.sync.report import RACED, raced
from pgcdc.errors import first_line
from pgcdc.checks.status import age, status_data, status_report, table_lines

if TYPE_CHECKING:
    pass


def cmd_config(args: argparse.Namespace) -> int:
    """Print the effective settings, secrets masked."""
    print(json.dumps(describe(_settings(args)), indent=2))
    return errors.OK


def cmd_check(args: argparse.Namespace) -> int:
    """Check every part the settings name that can be reached without Spark; say what to do next."""
    settings = _settings(args)
    identities = {}
    for role, dsn in (("source.dsn", settings.source.dsn), ("source.replica_dsn", settings.source.replica_dsn)):
        if dsn is None:
            continue
        with connect(dsn, role=role) as conn:
            version, standby = server(conn)
            installed = capture.installed_version(conn)
            identities[role] = capture.identity(conn)
        if role == "source.replica_dsn" and not standby:
            raise SourceError("source.replica_dsn is not a hot standby (a primary, or promoted); point it at a "
                              "standby of source.dsn, or remove it")
        print(f"{role}: ok ({masked_dsn(dsn)}; PostgreSQL {version}{', hot standby' if standby else ''}"
              f"{'' if role != 'source.dsn' else f'; pgcdc schema v{installed}' if installed else '; pgcdc not installed'})")
        if role == "source.dsn" and installed == capture.SCHEMA_VERSION:
            with connect(dsn, role=role) as conn:
                for table, columns in access.readable_left_out(conn):
                    print(f"note: {table} leaves out {', '.join(columns)}, but role {conn.info.user} may read "
                          f"{'it' if len(columns) == 1 else 'them'}; sync as a role made with `pgcdc grant ROLE "
                          "--reader` (granted the kept columns alone) so no mistake can read them")
    if len(identities) == 2 and len(set(identities.values())) == 2:
        raise SourceError(f"source.replica_dsn is not a standby of source.dsn's database (identity "
                          f"{identities['source.replica_dsn']}, the primary's {identities['source.dsn']}); "
                          "point it at a standby of the same cluster and database")
    print(f"target.root: {check_target_root(settings.target.root)}")
    return errors.OK


def cmd_status(args: argparse.Namespace) -> int:
    """Capture and sync health at a glance; exit 1 when something needs attention (for schedulers)."""
    settings = _settings(args)
    problems = []
    if settings.source.replica_dsn is not None:
        try:
            with connect(settings.source.replica_dsn, role="source.replica_dsn") as replica:
                if not server(replica)[1]:
                    problems.append("source.replica_dsn is not a hot standby (it was promoted?); point it at a "
                                    "standby of source.dsn, or remove it")
        except SourceError as exc:
            problems.append(f"the replica cannot be reached: {exc}")
    with connect(settings.source.dsn) as conn:
        if args.json:
            data = status_data(conn, problems)
            _print_json(data)
            healthy = data["healthy"]
        else:
            report, healthy = status_report(conn, problems)
            print(report)
    return errors.OK if healthy else errors.ATTENTION


def cmd_consumers(args: argparse.Namespace) -> int:
    """List consumers with their lag, or drop one for good."""
    with _source(args) as conn:
        capture.require_schema(conn)
        if args.action == "drop":
            if not args.name:
                print("pgcdc: name the consumer to drop: pgcdc consumers drop NAME --yes", file=sys.stderr)
                return errors.USAGE
            if not args.yes:
                print(f"pgcdc: dropping consumer {args.name} forgets its sync state in the database (its Delta tables "
                      "stay as they are); re-run with --yes to confirm", file=sys.stderr)
                return errors.USAGE
            states = consumers.drop(conn, args.name)
            print(f"dropped consumer {args.name} ({states} table state(s)); the queue no longer keeps events for it")
            print(f"next: delete its Delta tables, or run `pgcdc resync` as {args.name} to start it again from a copy")
            return errors.OK
        found = consumers.list_consumers(conn)
        max_age, max_size = consumers.retention(conn)
    if args.json:
        from dataclasses import asdict

        _print_json({"consumers": [asdict(c) for c in found],
                     "retention": {"max_age": max_age, "max_size": max_size}})
        return errors.OK
    if not found:
        print("no consumers yet; `pgcdc ingest` registers one (settings `consumer`)")
    else:
        rows = [("consumer", "tables", "pending events", "oldest pending", "last sync", "state")]
        rows += [(c.name, str(c.tables), str(c.pending_events), age(c.oldest_pending),
                  age(c.last_sync) + " ago" if c.last_sync else "never",
                  "running" if c.running else (f"resync needed: {', '.join(c.resync_needed)}" if c.resync_needed
                                               else "idle"))
                 for c in found]
        print("\n".join(table_lines(rows)))
    print(f"retention limit: max age {max_age or 'none'}, max size {max_size or 'none'} "
          "(a consumer past it copies its tables again; change with `pgcdc retention`)")
    return errors.OK


def cmd_retention(args: argparse.Namespace) -> int:
    """Show or change the retention limit of unapplied queue events."""
    with _source(args) as conn:
        capture.require_schema(conn)
        consumers.set_retention(conn, args.max_age, args.max_size)
        max_age, max_size = consumers.retention(conn)
    print(f"retention limit: max age {max_age or 'none'}, max size {max_size or 'none'}")
    print("past it, `pgcdc.maintain()` (each ingest runs it) marks the lagging consumer's tables; its next ingest "
          "copies them again")
    return errors.OK


def add_follow_options(p: argparse.ArgumentParser) -> None:
    """`ingest`'s options (also the spark-submit entry point's)."""
    p.add_argument("--follow", action="store_true", help="keep syncing until SIGTERM/Ctrl-C: a run as soon as the "
                   "queue holds work (docs/operations.md)")
    p.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS",
                   help="--follow: how often to check the queue while idle (default 1)")
    p.add_argument("--compact-every", type=_positive, metavar="SECONDS",
                   help="--follow: run `pgcdc compact` between runs this often")
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="--follow: serve Prometheus metrics on this port")
    p.add_argument("--metrics-address", default="127.0.0.1", metavar="ADDRESS",
                   help="--follow: the address to serve them on (default 127.0.0.1; 0.0.0.0 for every interface)")


def _positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return number


def _version() -> str:
    """pgcdc's version and the Spark/Delta pair it runs with."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return f"pgcdc {__version__} (pyspark {of('pyspark')}, delta-spark {of('delta-spark')}, Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgcdc", description="Keep Delta Lake tables in sync with PostgreSQL tables.")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file (default: $PGCDC_CONFIG)")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--log-level", choices=log.LEVELS, type=str.upper,
                        help="least level of the log on stderr (default: $PGCDC_LOG_LEVEL, else INFO)")
    parser.add_argument("--log-format", choices=log.FORMATS,
                        help="text lines, or one JSON object per line (default: $PGCDC_LOG_FORMAT, else text)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        return p

    _source_commands(add)
    _sync_commands(add)
    _check_commands(add)
    demo = add("demo", cmd_demo, "run the whole path on a throwaway local PostgreSQL and Delta folder")
    demo.add_argument("--lake", default=".demo/lake", help="folder for the demo's Delta tables (recreated)")
    return parser


_Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def _source_commands(add: _Add) -> None:
    """The commands that change the source database: install, attach, grant, ..."""
    add("config", cmd_config, "print the effective settings (secrets masked)")
    add("check", cmd_check, "check the settings and the connection to PostgreSQL")
    add("install", cmd_install, "create or upgrade the pgcdc schema in the source database")
    p = add("uninstall", cmd_uninstall, "detach all tables and drop the pgcdc schema")
    p.add_argument("--yes", action="store_true", help="confirm")
    p = add("attach", cmd_attach, "capture a table's changes, or every table of a schema (--schema)")
    p.add_argument("table", nargs="?", help="schema.table (quote mixed case: '\"Sales\".\"Orders\"')")
    p.add_argument("--schema", action="append", metavar="SCHEMA",
                   help="attach every table of the schema that can be captured, naming each one refused and why; "
                        "repeatable (exit 1 if some were refused)")
    p.add_argument("--key", help="comma-separated unique NOT NULL key columns (default: the primary key)")
    p.add_argument("--where", help="SQL predicate on the table's columns; only matching rows are synced")
    p.add_argument("--shard", type=int, help="routing number stored with every event; with --into, the source's "
                   f"shard in its fan-in (its rows carry it in column {shards.SHARD})")
    p.add_argument("--into", metavar="SCHEMA.TABLE", help="land the table in this fan-in's Delta table, beside other "
                   "sources of the same shape, each under its own --shard (docs/fan-in.md)")
    p.add_argument("--columns", metavar="A,B", help="read and land only these columns (and the key); a column "
                   "added later is left out (docs/columns.md)")
    p.add_argument("--exclude-columns", metavar="A,B", help="never read these columns (e.g. PII); a column added "
                   "later lands; with --schema, left out of every table that has them")
    p.add_argument("--delta-partition-by", metavar="COLUMN", help="partition the table's Delta table by this column "
                   "(readers filtering on it skip the rest; such a table is applied by the merge engine)")
    p.add_argument("--follow-new", action="store_true", help="with --schema: a table created there later (or a "
                   "partition detached into it) is attached by itself, by the DDL event trigger or the next run")
    p.add_argument("--on-subscriber", action="store_true", help="capture also fires under session_replication_role "
                   "= replica: for a table a logical replication subscription writes (its apply worker runs so)")
    p = add("grant", cmd_grant, "grant a role what a pgcdc reader (ingest, status, verify) or admin needs")
    p.add_argument("role", help="an existing role, e.g. one made with CREATE ROLE pgcdc_reader LOGIN PASSWORD '...'")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--reader", action="store_true", help="ingest, status, verify: read tables and queue, "
                                                             "write consumer states; no DDL, no TRUNCATE")
    kind.add_argument("--admin", action="store_true", help="also attach, detach, consumers drop, retention")
    p = add("detach", cmd_detach, "stop capturing a table, or every table of a schema (--schema)")
    p.add_argument("table", nargs="?")
    p.add_argument("--schema", action="append", metavar="SCHEMA", help="detach every table of the schema; repeatable")
    p.add_argument("--keep-rows", action="store_true", help="a fan-in's source: keep its rows in the fan-in's Delta "
                   "tables (by default each consumer's next run removes them)")
    p = add("list", cmd_list, "list attached tables")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("retention", cmd_retention, "show or set how far a consumer may fall behind before it must resync")
    p.add_argument("--max-age", metavar="INTERVAL", help="e.g. '7 days'; 'none' for no limit")
    p.add_argument("--max-size", metavar="SIZE", help="queue size, e.g. '20 GB'; 'none' for no limit")


def _sync_commands(add: _Add) -> None:
    """The commands that write Delta tables: ingest, compact, resync, ..."""
    p = add("ingest", cmd_ingest, "sync attached tables into Delta once, or --follow (local Spark; `submit` for "
            "spark-submit)")
    add_follow_options(p)
    p = add("compact", cmd_compact, "OPTIMIZE and VACUUM the consumer's Delta tables (never beside its ingest)")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="default: the configured (or all attached) tables")
    p.add_argument("--retain-hours", type=float, metavar="HOURS",
                   help="VACUUM keeps files older versions need for this long (default and minimum: the table's "
                        "delta.deletedFileRetentionDuration, 7 days unless set)")
    p = add("submit-args", cmd_submit_args, "print spark-submit's arguments for the ingest job: "
            "spark-submit $(pgcdc --config F submit-args) --config F")
    p.add_argument("--job", metavar="PATH", help="entry point to name (default: the packaged pgcdc/cli/job.py)")
    p = add("submit", cmd_submit, "run the ingest job through spark-submit with this environment's pyspark and "
            "Python (any directory, venv not activated); spark-submit options follow, e.g. --master spark://...")
    p.add_argument("spark_args", nargs=argparse.REMAINDER, help="options passed to spark-submit first")
    p = add("resync", cmd_resync, "copy tables into Delta again from scratch (after re-attach, restore, schema change)")
    p.add_argument("tables", nargs="+", metavar="TABLE")
    p = add("adopt", cmd_adopt, "take over a Delta table another tool wrote at a table's place under target.root: "
            "only the rows that differ from PostgreSQL's are rewritten (no copy)")
    p.add_argument("tables", nargs="+", metavar="TABLE")
    add("reset-watermark", cmd_reset_watermark,
        "after a database restore or a failover to a lagging standby: read again the rows Delta changed "
        "after the restore point (a table copied again where that cannot hold)")


def _check_commands(add: _Add) -> None:
    """The commands that read both sides and report: verify, cut, status, consumers."""
    p = add("verify", cmd_verify, "compare Delta tables with PostgreSQL row by row (exit 1 if any differs)")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="default: the configured (or all attached) tables")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("repair", cmd_repair, "rewrite only the rows verify finds different (read again from PostgreSQL), "
            "while the application writes")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="default: the configured (or all attached) tables")
    p.add_argument("--dry-run", action="store_true", help="say what differs, queue and write nothing")
    p.add_argument("--all", action="store_true", dest="whole", help="compare the whole table, even within an hour of "
                   "a verify (which otherwise says which key ranges to compare)")
    p = add("cut", cmd_cut, "print the newest cut: the Delta version at which each table agrees with the others "
            "as of one snapshot of the database (docs/readers.md)")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="only these (Delta or PostgreSQL names): the newest "
                   "cut holding all of them (default: every table of the consumer)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("status", cmd_status, "show whether capture and sync are healthy (exit 1: attention needed)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("consumers", cmd_consumers, "list consumers with their lag; `consumers drop NAME --yes` forgets one")
    p.add_argument("action", nargs="?", choices=["list", "drop"], default="list")
    p.add_argument("name", nargs="?", help="the consumer to drop")
    p.add_argument("--yes", action="store_true", help="confirm a drop")
    p.add_argument("--json", action="store_true", help="print JSON")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code is one of pgcdc.errors' (OK, ATTENTION, USAGE, BUSY, FAILURE)."""
    args = build_parser().parse_args(argv)
    try:
        log.setup(args.log_level, args.log_format)
        return int(args.func(args))
    except PgcdcError as exc:
        print(f"pgcdc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pgcdc: interrupted; nothing half-written stays behind, the next run resumes", file=sys.stderr)
        return errors.INTERRUPTED
    except Exception as exc:  # Spark/Py4J/driver failures: one line, the traceback on request
        if os.environ.get("PGCDC_DEBUG"):
            raise
        # (nothing half-applied stays: a batch lands in one Delta commit or not at all; whether a
        # re-run gets further depends on the cause, which `pgcdc status` keeps too)
        why = RACED if raced(exc) else "; no batch was half-applied; fix the cause and run it again (`pgcdc status` " \
            "names the failed tables)"
        print(f"pgcdc: error: {first_line(exc)}{why}; set PGCDC_DEBUG=1 for the full traceback", file=sys.stderr)
        return errors.FAILURE


if __name__ == "__main__":
    sys.exit(main())
