"""Settings: one pydantic-settings model, loaded from a TOML file and PGCDC_* variables.

Precedence: environment (PGCDC_SOURCE__DSN, ...) over the TOML file over defaults.
The file comes from `--config PATH` or PGCDC_CONFIG. Secrets are SecretStr and only
ever shown masked (see `masked_dsn`).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from pgcdc.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SourceSettings(BaseModel):
    """Where the PostgreSQL tables live."""

    model_config = {"extra": "forbid"}

    dsn: SecretStr = Field(description="libpq conninfo or URI of the primary (writes: install, attach, state mirror)")
    replica_dsn: SecretStr | None = Field(
        default=None,
        description="optional hot standby; when set, the ingest job reads events and rows there",
    )

    @property
    def reader_dsn(self) -> SecretStr:
        """Where the ingest reads events and rows: the standby if there is one."""
        return self.replica_dsn or self.dsn

    @property
    def reader_role(self) -> str:
        """The setting reader_dsn comes from, as errors name it."""
        return "source.replica_dsn" if self.replica_dsn else "source.dsn"


class TargetSettings(BaseModel):
    """Where the Delta tables land: <root>/<schema>.<table>."""

    model_config = {"extra": "forbid"}

    root: str = Field(description="directory or URI under which each table gets its Delta folder")
    deletion_vectors: bool = Field(
        default=True,
        description="create tables with deletion vectors (batches mark old rows deleted instead of rewriting "
        "their files); false: copy-on-write tables that readers without deletion-vector support read "
        "(applied by the merge engine)",
    )
    change_data_feed: bool = Field(
        default=False,
        description="create tables with Delta's change data feed on (applied by the merge engine, so an update "
        "reads back as update_preimage/update_postimage)",
    )
    column_mapping: Literal["auto", "always", "off"] = Field(
        default="auto",
        description="auto: a column dropped or renamed in a Delta table over 64 MiB turns Delta's column mapping "
        "(name) on, so drops and renames change metadata alone (readers need column mapping; docs/readers.md); "
        "always: in any table; off: the table is rewritten from itself instead (every reader keeps reading it)")
    row_tracking: bool = Field(
        default=False, description="create tables with row tracking (stable row ids; applied by the merge engine)")
    deletes: Literal["hard", "soft"] = Field(
        default="hard",
        description="hard: a row deleted in PostgreSQL leaves the Delta table; soft: it stays with its last synced "
        "values, _pgcdc_deleted = true and _pgcdc_deleted_at (applied by the merge engine; docs/columns.md)")
    metadata_columns: bool = Field(
        default=False,
        description="add _pgcdc_synced_at (when the commit that wrote the row was made) and _pgcdc_txid (the "
        "greatest source txid of the changes it applied to the row; a copy's: its watermark) to every row "
        "(applied by the merge engine; docs/columns.md)")
    history: bool = Field(
        default=False,
        description="also keep <table>__history beside each table: a row version per commit that changed the row, "
        "with _pgcdc_valid_from/_valid_to, _pgcdc_is_current (turns the change data feed on, so the merge engine "
        "applies it; docs/history.md)")
    database: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="also register each table in the Spark session's catalog as <database>.<schema>_<table> "
        "(created if missing; a persistent catalog needs e.g. spark.sql.catalogImplementation = hive)")


class IngestSettings(BaseModel):
    """How the ingest job reads and batches events."""

    model_config = {"extra": "forbid"}

    mode: Literal["out_of_order", "strict"] = Field(
        default="out_of_order",
        description="out_of_order: apply committed events above txmin too (low latency); "
        "strict: only events below txmin, in commit-safe txid order",
    )
    engine: Literal["auto", "merge", "fast"] = Field(
        default="auto",
        description="how batches are applied: merge: Delta's public MERGE (any Delta build); fast: deletion "
        "vectors and new files written through Delta's internal API (local tables, tested Delta versions); "
        "auto: fast where it is proven to write what Delta would, else merge (docs/engines.md)",
    )
    max_events_per_batch: int = Field(default=10_000, gt=0, description="queue rows per batch")
    max_keys_per_batch: int = Field(default=1_000_000, gt=0, description="changed keys per batch")
    jdbc_partitions: int = Field(default=4, gt=0, le=256, description="parallel JDBC reads per table")
    small_batch_keys: int = Field(
        default=100_000, gt=0,
        description="a batch of up to this many queued keys is small: read in one JDBC partition, and (where "
        "its keys are read into the driver, see driver_keys) its rows too, written by the driver; larger "
        "batches are read in one partition per this many keys, up to jdbc_partitions",
    )
    driver_keys: int = Field(
        default=2_000_000, ge=0,
        description="a batch of up to this many queued keys (a one-column integer or text key, local files) "
        "has its keys read into the driver, which finds and marks their old rows without a Spark job; larger "
        "batches (and 0) are joined by Spark",
    )
    on_schema_change: Literal["copy", "fail"] = Field(
        default="copy",
        description="when a table's columns no longer match its Delta table's (a column added, dropped, renamed "
        "or retyped, see docs/capture.md): copy: bring the Delta table to them in place where that is exact (no "
        "row read from PostgreSQL), else copy the table again, so every row takes the new columns and their values "
        "(defaults included); fail: stop the table's sync naming `pgcdc resync`",
    )
    compact_files: int = Field(
        default=40, ge=0,
        description="a table with at least this many small files (under 32 MiB) has them compacted by Delta's "
        "OPTIMIZE at the end of a run that applied batches to it: every batch adds a file, and each file makes "
        "later batches slower; 0 = never (`pgcdc compact` still does it)",
    )
    parallel_tables: int = Field(
        default=1, ge=1, le=16,
        description="tables one run applies at once, each in a lane of its own (two source connections, a Spark "
        "session on the shared SparkContext) that joins the consumer as a worker: a slow table holds back only "
        "its lane; 1 = one table after another",
    )
    cuts: bool = Field(
        default=True,
        description="out_of_order mode: each pass reads every table's rows as of one snapshot of the reader, so "
        "that after the pass the consumer's tables agree with each other as of that snapshot (a cut, "
        "docs/readers.md; `pgcdc cut` names each table's Delta version); false: each batch reads the rows as "
        "they are when it reads them. Strict mode makes no cuts",
    )
    cut_seconds: float = Field(
        default=60.0, gt=0,
        description="a pass holds its snapshot (which holds back vacuum on the source) for at most about this "
        "long: tables it reaches later read their rows as they are then and are left out of its cut, named",
    )
    recopy_fraction: float = Field(
        default=0.25, ge=0, le=1,
        description="a batch changing at least this fraction of a table's rows (estimated) is applied by "
        "copying the table again, which is faster for such batches and leaves it compact; 0 = never",
    )


class CopySettings(BaseModel):
    """How a table is copied whole (first sync, resync, a copy a run decides on): in chunks by key."""

    model_config = {"extra": "forbid"}

    chunk_rows: int = Field(
        default=1_000_000, gt=0,
        description="rows of a copy's first chunk (of every chunk with chunk_seconds = 0): each chunk is read in a "
        "snapshot of its own and lands in one Delta commit carrying the copy's progress, so the longest snapshot a "
        "copy holds is one chunk's and a killed copy resumes from its last chunk",
    )
    chunk_mb: int = Field(
        default=256, gt=0,
        description="at most about this many MiB of the table (pg_table_size per row) in the first chunk: wide "
        "rows make a smaller one",
    )
    chunk_seconds: float = Field(
        default=5.0, ge=0,
        description="each chunk after the first is sized to take about this long at the pace the last one read "
        "(between an eighth of the first's rows and 64 times them): a chunk's fixed cost (its Spark job, Delta "
        "commit and bookkeeping, ~0.5 s) is spread over more rows on a big table, and its snapshot is held about "
        "this long; 0 = every chunk chunk_rows",
    )
    max_rows_per_second: int = Field(
        default=0, ge=0,
        description="a copy waits between chunks to read no more than this many rows a second on average "
        "(gentle on a busy source); 0 = as fast as it goes",
    )


class WatchSettings(BaseModel):
    """A follower that compares a slice of one table's rows with PostgreSQL every so often, the
    tables in turn (pgcdc/sync/watch.py; docs/operations.md, "Always watching")."""

    model_config = {"extra": "forbid"}

    every: float = Field(
        default=0.0, ge=0,
        description="seconds between slices a follower (`ingest --follow`) compares; 0 = off",
    )
    ranges: int = Field(
        default=16, gt=0, le=1000,
        description="key ranges (~1000 rows each) a slice compares: with `every`, how fast a round over every "
        "table's rows goes",
    )
    repair: bool = Field(
        default=False,
        description="queue the rows a slice finds different as changes, which the follower's next run rewrites "
        "(else `pgcdc status` says ATTENTION until `pgcdc repair TABLE`)",
    )


class SparkSettings(BaseModel):
    """The Spark session pgcdc builds for `pgcdc ingest` (spark-submit brings its own master)."""

    model_config = {"extra": "forbid"}

    master: str = Field(default="local[2]", description="Spark master URL")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark confs, e.g. memory")


class Settings(BaseSettings):
    """All pgcdc settings."""

    model_config = SettingsConfigDict(env_prefix="PGCDC_", env_nested_delimiter="__", extra="forbid")

    source: SourceSettings
    target: TargetSettings
    consumer: str = Field(default="default", description="name of this consumer; its state is kept per table")
    tables: list[str] = Field(
        default_factory=list, description="tables to sync: names (schema.table) and patterns (app.*, *.orders); "
        "empty means every attached table"
    )
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    copies: CopySettings = Field(default_factory=CopySettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)

    @field_validator("consumer")
    @classmethod
    def _consumer_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("use letters, digits, '_', '.', '-' only")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file is passed as init kwargs by load_settings; the environment wins over it.
        return (env_settings, init_settings)


def config_path(explicit: str | Path | None = None) -> Path | None:
    """The config file to read: --config, else PGCDC_CONFIG, else none."""
    value = explicit or os.environ.get("PGCDC_CONFIG")
    return Path(value) if value else None


def load_settings(config: str | Path | None = None) -> Settings:
    """Load settings from the TOML file (if any) and the environment; raise ConfigError on any problem."""
    path = config_path(config)
    data: dict[str, Any] = {}
    where = "the environment (PGCDC_*)"
    if path is not None:
        where = str(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} not found; pass --config PATH or set PGCDC_CONFIG "
                              "(see conf/pgcdc.example.toml)")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(f"invalid settings in {where}: {describe_errors(exc)}") from None


def _env_name(loc: tuple[Any, ...]) -> str:
    return "PGCDC_" + "__".join(str(p).upper() for p in loc if not isinstance(p, int))


def describe_errors(exc: ValidationError) -> str:
    """One line per problem, naming the setting and its env variable (and saying when the value
    came from that variable); input values are left out (they may be secrets)."""
    parts = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc)
        if err["type"] == "missing":
            missing = _required_under(loc) or [loc]
            msg = "missing; set " + " and ".join(
                f"{'.'.join(map(str, m))} in the config file or {_env_name(m)}" for m in missing)
        else:
            msg = err["msg"]
        source = f" (from {_env_name(loc)})" if loc and _env_name(loc) in os.environ else ""
        parts.append(f"{key}{source}: {msg}")
    return "; ".join(parts)


def _required_under(loc: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """For a missing section (e.g. `source`), the required settings inside it (`source.dsn`)."""
    model: Any = Settings
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
    fields = getattr(model, "model_fields", None)
    return [(*loc, name) for name, f in fields.items() if f.is_required()] if fields else []


def masked_dsn(dsn: SecretStr | str | None) -> str | None:
    """The DSN with its password replaced by ****, for printing."""
    if dsn is None:
        return None
    raw = dsn.get_secret_value() if isinstance(dsn, SecretStr) else dsn
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(raw)
    except Exception:
        return "**** (unparsable DSN)"
    if parts.get("password"):
        parts["password"] = "****"
    return make_conninfo("", **parts)


# Spark conf keys whose values are secrets (Spark's own spark.redaction.regex, with "key")
SECRET_CONF = re.compile(r"(?i)secret|password|token|key|credential")


def describe(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, secrets masked."""
    data = settings.model_dump(mode="python")
    data["source"]["dsn"] = masked_dsn(settings.source.dsn)
    data["source"]["replica_dsn"] = masked_dsn(settings.source.replica_dsn)
    data["spark"]["conf"] = {k: "****" if SECRET_CONF.search(k) else v for k, v in settings.spark.conf.items()}
    return data
