"""The `pgcdc` command: parses arguments and calls typed functions; nothing else lives here."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from collections.abc import Callable, Sequence

from pgcdc.errors import PgcdcError
from pgcdc.settings import Settings, describe, load_settings


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def cmd_config(args: argparse.Namespace) -> int:
    """Print the effective settings, secrets masked."""
    print(json.dumps(describe(_settings(args)), indent=2))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Check that the settings load and PostgreSQL answers; say what to do next."""
    from pgcdc.db import connect
    from pgcdc.settings import masked_dsn

    settings = _settings(args)
    for role, dsn in (("source.dsn", settings.source.dsn), ("source.replica_dsn", settings.source.replica_dsn)):
        if dsn is None:
            continue
        with connect(dsn, role=role) as conn:
            version = conn.execute("select current_setting('server_version')").fetchone()[0]
            standby = conn.execute("select pg_is_in_recovery()").fetchone()[0]
        print(f"{role}: ok ({masked_dsn(dsn)}; PostgreSQL {version}{', hot standby' if standby else ''})")
    print(f"target.root: {settings.target.root}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from pgcdc.demo import run_demo

    run_demo(Path(args.lake))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgcdc", description="Keep Delta Lake tables in sync with PostgreSQL tables.")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file (default: $PGCDC_CONFIG)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        return p

    add("config", cmd_config, "print the effective settings (secrets masked)")
    add("check", cmd_check, "check the settings and the connection to PostgreSQL")
    demo = add("demo", cmd_demo, "run the whole path on a throwaway local PostgreSQL and Delta folder")
    demo.add_argument("--lake", default=".demo/lake", help="folder for the demo's Delta tables (recreated)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PgcdcError as exc:
        print(f"pgcdc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pgcdc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
