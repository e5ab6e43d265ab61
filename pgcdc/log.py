"""pgcdc's log: one logger per module under "pgcdc", written to stderr as text lines or as one
JSON object per line (`--log-format json`, PGCDC_LOG_FORMAT), for a person or a log shipper.

A line may carry a machine-readable record (pgcdc/records.py, `extra=fields(record)`): the JSON
format puts its fields at the top level of its object; the text format shows only the message,
which says the same in words.
Every record passes a filter that masks the secrets of the loaded settings (DSN passwords,
secret Spark confs), should a driver or a library ever echo one.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pgcdc.errors import ConfigError
from pgcdc.settings import SECRET_CONF

if TYPE_CHECKING:
    from pgcdc.records import Record
    from pgcdc.settings import Settings

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_ROOT = logging.getLogger("pgcdc")
_secrets: set[str] = set()
_format = {"fmt": "text"}  # the format `setup` chose last


def fields(record: "Record | None") -> dict[str, Any]:
    """`extra=` for a log line that carries a machine-readable record (pgcdc/records.py):
    log.info(msg, extra=fields(records.Batch(...)))."""
    return {"fields": record.fields()} if record is not None else {}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(getattr(record, "fields", {}))
        if record.exc_info:
            data["traceback"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class _Redact(logging.Filter):
    """Masks every known secret in a record's message and fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            message = record.getMessage()
            masked = _mask(message)
            if masked != message:
                record.msg, record.args = masked, None
            if hasattr(record, "fields"):
                record.fields = {k: _mask(v) if isinstance(v, str) else v for k, v in record.fields.items()}
        return True


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time of the record (it may be replaced later)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _mask(text: str) -> str:
    for secret in _secrets:
        text = text.replace(secret, "****")
    return text


def setup(level: str | None = None, fmt: str | None = None) -> None:
    """Send pgcdc's records to stderr at `level` (default PGCDC_LOG_LEVEL, else INFO) in `fmt`
    (default PGCDC_LOG_FORMAT, else text). Called once per process by the CLI; again replaces."""
    level = (level or os.environ.get("PGCDC_LOG_LEVEL") or "INFO").upper()
    fmt = (fmt or os.environ.get("PGCDC_LOG_FORMAT") or "text").lower()
    if level not in LEVELS:
        raise ConfigError(f"log level {level!r} is not one of {', '.join(LEVELS)} (--log-level, PGCDC_LOG_LEVEL)")
    if fmt not in FORMATS:
        raise ConfigError(f"log format {fmt!r} is not one of {', '.join(FORMATS)} (--log-format, PGCDC_LOG_FORMAT)")
    _format["fmt"] = fmt
    handler = _Stderr()
    handler.setFormatter(_JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(_Redact())
    for old in list(_ROOT.handlers):
        _ROOT.removeHandler(old)
    _ROOT.addHandler(handler)
    _ROOT.setLevel(level)
    _ROOT.propagate = False


def on_terminal() -> bool:
    """Whether the log is text going to a terminal (a person watches: progress shows as a bar)."""
    return _format["fmt"] == "text" and sys.stderr.isatty()


def redact(settings: "Settings") -> None:
    """Mask the secrets of `settings` in every later record: DSN passwords, secret Spark confs."""
    from psycopg.conninfo import conninfo_to_dict

    for dsn in (settings.source.dsn, settings.source.replica_dsn):
        if dsn is None:
            continue
        try:
            password = conninfo_to_dict(dsn.get_secret_value()).get("password")
        except Exception:
            continue
        if password and len(str(password)) >= 4:  # (masking "a" would garble every message)
            _secrets.add(str(password))
    _secrets.update(v for k, v in settings.spark.conf.items() if SECRET_CONF.search(k) and len(v) >= 4)
