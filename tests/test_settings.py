"""Settings: TOML file, environment precedence, clear errors, masked secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pgcdc.cli.main import main
from pgcdc.errors import ConfigError
from pgcdc.settings import load_settings, masked_dsn

TOML = """
consumer = "lake"
tables = ["public.orders"]
[source]
dsn = "host=db port=5432 dbname=shop user=app password=s3cret-pw"
[target]
root = "/data/lake"
[ingest]
mode = "strict"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "pgcdc.toml"
    path.write_text(TOML)
    return path


def test_loads_toml_file(config_file: Path) -> None:
    s = load_settings(config_file)
    assert s.consumer == "lake"
    assert s.tables == ["public.orders"]
    assert s.ingest.mode == "strict"
    assert s.target.root == "/data/lake"
    assert "s3cret-pw" in s.source.dsn.get_secret_value()


def test_environment_wins_over_file(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCDC_INGEST__MODE", "out_of_order")
    monkeypatch.setenv("PGCDC_CONSUMER", "other")
    s = load_settings(config_file)
    assert (s.ingest.mode, s.consumer) == ("out_of_order", "other")


def test_config_path_from_environment(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCDC_CONFIG", str(config_file))
    assert load_settings().consumer == "lake"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope.toml not found"):
        load_settings(tmp_path / "nope.toml")


def test_missing_dsn_names_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[target]\nroot = "/x"\n')
    with pytest.raises(ConfigError, match=r"source: missing; set source.dsn in the config file or PGCDC_SOURCE__DSN"):
        load_settings(path)


def test_invalid_values_are_rejected_without_echoing_them(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(TOML.replace('mode = "strict"', 'mode = "fast"\nmax_events_per_batch = 0'))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "ingest.mode" in str(info.value) and "ingest.max_events_per_batch" in str(info.value)
    for lanes in (0, 17):  # (each lane holds two connections and a Spark session: bounded)
        path.write_text(TOML.replace('mode = "strict"', f'mode = "strict"\nparallel_tables = {lanes}'))
        with pytest.raises(ConfigError, match="ingest.parallel_tables"):
            load_settings(path)
    path.write_text(TOML + 'unknown_key = "x"\n')
    with pytest.raises(ConfigError, match="unknown_key"):
        load_settings(path)


def test_masked_dsn_hides_password() -> None:
    assert "s3cret" not in masked_dsn("host=h user=u password=s3cret")
    assert "****" in masked_dsn("postgresql://u:s3cret@h:5432/db")
    assert "s3cret" not in masked_dsn("postgresql://u:s3cret@h:5432/db")


def test_config_command_masks_secrets(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "config"]) == 0
    out = capsys.readouterr().out
    assert "s3cret-pw" not in out
    assert "password=****" in json.loads(out)["source"]["dsn"]


def test_cli_missing_config_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(tmp_path / "no.toml"), "config"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("pgcdc: error: config file") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_bad_environment_value_is_attributed_to_its_variable(config_file: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCDC_INGEST__MAX_EVENTS_PER_BATCH", "lots")
    with pytest.raises(ConfigError, match=r"ingest.max_events_per_batch \(from PGCDC_INGEST__MAX_EVENTS_PER_BATCH\)"):
        load_settings(config_file)
