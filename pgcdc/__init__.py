"""pgcdc: keep Delta Lake tables in sync with PostgreSQL tables, exactly once.

Data path, one module per stage:
settings -> capture (SQL install/attach) -> events -> enrich -> apply -> state,
wired together by ingest (and jobs/ingest.py for spark-submit).
"""

from pgcdc.lake.cuts import read_cut

__version__ = "0.1.0"
__all__ = ["read_cut", "__version__"]
