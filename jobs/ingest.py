"""The ingest job for spark-submit from a checkout; the same as the packaged entry point
pgcdc/cli/job.py (which `pgcdc submit-args` names, for any directory):

    spark-submit $(pgcdc --config pgcdc.toml submit-args --job jobs/ingest.py) --config pgcdc.toml
"""

import sys

from pgcdc.cli.job import main

if __name__ == "__main__":
    sys.exit(main())
