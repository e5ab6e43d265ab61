"""The spark-submit entry point of the ingest job, shipped in the package so spark-submit runs
it from any directory, with or without a checkout:

    spark-submit $(pgcdc --config pgcdc.toml submit-args) --config pgcdc.toml

(`pgcdc submit-args` prints the packages, jars and confs, then this file's path.) The same
job as `pgcdc ingest`, in the session spark-submit provides. Settings come from --config /
PGCDC_CONFIG and PGCDC_* variables (conf/pgcdc.example.toml); `--follow` and the other
options of `pgcdc ingest` work here too. Exit codes: those of `pgcdc` (pgcdc/errors.py,
docs/operations.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pgcdc.cli.main import main as cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pgcdc ingest job (spark-submit); the options of `pgcdc ingest`")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file (default: $PGCDC_CONFIG)")
    parser.add_argument("--log-level")
    parser.add_argument("--log-format")
    args, ingest = parser.parse_known_args(argv)
    top = [arg for name in ("config", "log_level", "log_format") if getattr(args, name)
           for arg in (f"--{name.replace('_', '-')}", getattr(args, name))]
    return cli([*top, "ingest", *ingest])


def entry() -> None:
    """Entry point for runners that call a function (a wheel task): exits with main's code."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
