"""What the `pgcdc` command modules share: loading the settings, printing JSON."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import TYPE_CHECKING

from pgcdc import log
from pgcdc.settings import Settings, load_settings
from pgcdc.source.db import connect

if TYPE_CHECKING:
    import psycopg


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings `--config` (or the environment) names; their secrets are masked in the log from now on."""
    settings = load_settings(args.config)
    log.redact(settings)
    return settings


def source_of(args: argparse.Namespace) -> "psycopg.Connection":
    """A connection to the source database the settings name."""
    return connect(settings_of(args).source.dsn)


def print_json(data: object) -> None:
    """One JSON document on stdout (times as ISO 8601)."""
    print(json.dumps(data, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)))
