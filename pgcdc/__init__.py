"""pgcdc: keep Delta Lake tables in sync with PostgreSQL tables, exactly once.

Data path, one module per stage:
settings -> capture (SQL install/attach) -> events -> enrich -> apply -> state,
wired together by ingest (and jobs/ingest.py for spark-submit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pgcdc.settings import Settings

__version__ = "0.1.0"


def read_cut(spark: "SparkSession", config: "Settings | str | None" = None,
             tables: list[str] | None = None) -> dict[str, "DataFrame"]:
    """The consumer's Delta tables as of its newest cut (docs/readers.md): those `tables` name
    (Delta or PostgreSQL names; default: all of them), each read at the version at which they all
    agree with PostgreSQL as of one snapshot, by Delta table name. `config`: the settings or the
    path of their TOML file (default: $PGCDC_CONFIG)."""
    from pgcdc.lake import cuts
    from pgcdc.settings import Settings, load_settings

    settings = config if isinstance(config, Settings) else load_settings(config)
    cut = cuts.newest(spark, settings.target.root, settings.consumer, tables)
    return cuts.read_tables(spark, cut, tables)
