"""What the `pgcdc` command modules share: loading the settings, printing JSON."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from pgcdc import log
from pgcdc.settings import Settings, load_settings


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings `--config` (or the environment) names; their secrets are masked in the log from now on."""
    settings = load_settings(args.config)
    log.redact(settings)
    return settings


def print_json(data: object) -> None:
    """One JSON document on stdout (times as ISO 8601)."""
    print(json.dumps(data, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)))
