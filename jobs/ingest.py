"""spark-submit entry point of the ingest job.

    spark-submit --properties-file conf/spark-defaults.conf --jars "$(python -m pgcdc.logstore)" jobs/ingest.py [--config PATH]

The same job as `pgcdc ingest`, in the session spark-submit provides. Settings come
from --config / PGCDC_CONFIG and PGCDC_* variables (see conf/pgcdc.example.toml).
Exit codes: 0 every table caught up; 2 a pgcdc error (one line on stderr); 1 another failure.
"""

import argparse
import sys

from pgcdc.cli import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="pgcdc ingest job")
    parser.add_argument("--config", metavar="PATH", help="TOML settings file (default: $PGCDC_CONFIG)")
    args = parser.parse_args()
    sys.exit(main((["--config", args.config] if args.config else []) + ["ingest"]))
