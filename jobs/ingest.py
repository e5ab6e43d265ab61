"""spark-submit entry point of the ingest job.

    spark-submit --properties-file conf/spark-defaults.conf jobs/ingest.py [--config PATH]

Settings come from --config / PGCDC_CONFIG and PGCDC_* variables (see conf/pgcdc.example.toml).
Exits 0 when every table caught up, 2 with a one-line message on a pgcdc error.
"""

import argparse
import sys

from pgcdc.errors import PgcdcError
from pgcdc.ingest import run
from pgcdc.settings import load_settings
from pgcdc.spark import get_session


def main() -> int:
    parser = argparse.ArgumentParser(description="pgcdc ingest job")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file (default: $PGCDC_CONFIG)")
    args = parser.parse_args()
    try:
        settings = load_settings(args.config)
        run(settings, get_session(settings.spark, app_name=f"pgcdc-ingest-{settings.consumer}"))
    except PgcdcError as exc:
        print(f"pgcdc: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
