"""pgcdc: keep Delta Lake tables in sync with PostgreSQL tables, exactly once.

Data path, one module per stage:
settings -> capture (SQL install/attach) -> events -> enrich -> apply -> state,
wired together by ingest (and jobs/ingest.py for spark-submit).
"""

__version__ = "0.1.0"
