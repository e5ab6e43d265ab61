"""Connecting to PostgreSQL: real server, clear one-line errors, no secrets in them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pgcdc.source.db import connect, jdbc_options
from pgcdc.errors import SourceError
from pgcdc.localpg import free_port


def test_connects_to_the_test_server(dsn: str) -> None:
    with connect(dsn) as conn:
        assert conn.execute("select current_setting('server_version_num')::int").fetchone()[0] >= 130000


def test_jdbc_options_reach_the_connected_database_with_the_password_outside_the_url(dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    with connect(dsn) as conn:
        options = jdbc_options(conn)
        expected = conninfo_to_dict(dsn)
        assert options["url"] == (f"jdbc:postgresql://{conn.info.host}:{conn.info.port}/"
                                  f"{conn.info.get_parameters()['dbname']}")
        assert options["user"] == expected["user"] and options["password"] == expected["password"]
        assert expected["password"] not in options["url"]


def test_wrong_password_is_a_clear_error_without_the_password(pg_server, dsn: str) -> None:
    bad = pg_server.dsn(None, password="Wr0ng-Secret")
    with pytest.raises(SourceError) as info:
        connect(bad)
    msg = str(info.value)
    assert "password authentication failed" in msg
    assert "Wr0ng-Secret" not in msg and "check host, port, user and password" in msg


def test_nothing_listening_is_a_clear_error(pg_server) -> None:
    """libpq's cause ("Connection refused") is kept, not only its hint."""
    with pytest.raises(SourceError, match="cannot connect to PostgreSQL via source.dsn") as info:
        connect(pg_server.dsn(None, port=str(free_port()), password="Top-Secret"))
    msg = str(info.value)
    assert "failed: Connection refused; Is the server running" in msg and "Top-Secret" not in msg


def test_unknown_host_is_a_clear_error(pg_server) -> None:
    with pytest.raises(SourceError, match="failed to resolve host 'nosuchhost.invalid'"):
        connect(pg_server.dsn(None, host="nosuchhost.invalid"))


def test_malformed_dsn(pg_server) -> None:
    with pytest.raises(SourceError, match="not a valid PostgreSQL DSN"):
        connect("host=127.0.0.1 password=Top-Secret bogus_option=1")


def test_cli_wrong_dsn_is_one_line(tmp_path: Path, pg_server) -> None:
    from psycopg.conninfo import conninfo_to_dict

    port = conninfo_to_dict(pg_server.dsn())["port"]
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[source]\ndsn = "host=127.0.0.1 port={port} user=postgres password=Wr0ng-Secret"\n'
                   f'[target]\nroot = "{tmp_path}"\n')
    proc = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), "check"],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "password authentication failed" in proc.stderr and "Wr0ng-Secret" not in proc.stderr
