"""The spark-submit entry point of the ingest job, shipped in the package so spark-submit runs
it from any directory, with or without a checkout:

    spark-submit $(pgcdc --config pgcdc.toml submit-args) --config pgcdc.toml

(`pgcdc submit-args` prints the packages, jars and confs, then this file's path.) The same
job as `pgcdc ingest`, in the session spark-submit provides. Settings come from --config /
PGCDC_CONFIG and PGCDC_* variables (conf/pgcdc.example.toml). Exit codes: 0 every table
caught up; 2 a pgcdc error (one line on stderr); 1 another failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from pgcdc.cli import main as cli

    parser = argparse.ArgumentParser(description="pgcdc ingest job (spark-submit)")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file (default: $PGCDC_CONFIG)")
    args = parser.parse_args(argv)
    return cli((["--config", args.config] if args.config else []) + ["ingest"])


def entry() -> None:
    """Entry point for runners that call a function (a wheel task): exits with main's code."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
