"""PostgreSQL connections with errors a person can act on and no secrets in them."""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import SecretStr

from pgcdc.errors import SourceError
from pgcdc.settings import masked_dsn

# The settings of every session that reads table rows (the ingest's reader and its JDBC reads,
# verify): values stored as text come out in one form whatever the database's or role's
# defaults (TimeZone, DateStyle, ...); names resolve in pg_catalog only, so no operator or
# function a user created is reached through the search_path; row-level security raises an
# error instead of hiding rows; no idle timeout ends a copy's exported snapshot.
READER_SETTINGS = {
    "search_path": "pg_catalog, pg_temp",
    "row_security": "off",
    "TimeZone": "UTC",
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "idle_in_transaction_session_timeout": "0",
}


def reader_statements() -> str:
    """READER_SETTINGS as SET statements (for a JDBC sessionInitStatement)."""
    return "; ".join(f"SET {name} = '{value}'" if name != "search_path" else f"SET {name} = {value}"
                     for name, value in READER_SETTINGS.items())


def _reader_options() -> str:
    """READER_SETTINGS as libpq `options` (-c name=value, spaces escaped)."""
    return " ".join(f"-c {name}={value.replace(' ', '')}" for name, value in READER_SETTINGS.items())


def connect(dsn: SecretStr | str, *, role: str = "source.dsn", autocommit: bool = True,
            reader: bool = False) -> psycopg.Connection:
    """Open a connection; a failure becomes a one-line SourceError naming the setting to fix.
    `reader`: a session that reads table rows, with READER_SETTINGS."""
    raw = dsn.get_secret_value() if isinstance(dsn, SecretStr) else dsn
    try:
        extra: dict[str, Any] = {}
        if reader:
            from psycopg.conninfo import conninfo_to_dict

            extra["options"] = f"{conninfo_to_dict(raw).get('options') or ''} {_reader_options()}".strip()
        return psycopg.connect(raw, autocommit=autocommit, connect_timeout=10, application_name="pgcdc", **extra)
    except psycopg.ProgrammingError:  # malformed conninfo: libpq's message may quote any part of it, the password too
        raise SourceError(f"{role} is not a valid PostgreSQL DSN (libpq cannot parse it); "
                          "use 'host=... dbname=... user=...' or postgresql://user@host/db") from None
    except psycopg.OperationalError as exc:
        reason = libpq_reason(scrub(str(exc), raw))
        raise SourceError(f"cannot connect to PostgreSQL via {role} ({masked_dsn(raw)}): {reason}; "
                          "check host, port, user and password", transient=is_transient(reason)) from None


def server(conn: psycopg.Connection) -> tuple[str, bool]:
    """The server's version and whether it is a hot standby (in recovery)."""
    version, standby = conn.execute("select current_setting('server_version'), pg_is_in_recovery()").fetchone()
    return str(version), bool(standby)


# libpq's words for a server that may answer later (down, restarting, unreachable for now)
_TRANSIENT = ("connection refused", "timeout expired", "could not connect", "server closed the connection",
              "the database system is starting up", "the database system is shutting down",
              "the database system is in recovery mode", "no such file or directory", "too many clients")


def is_transient(reason: str) -> bool:
    """Whether a connection failure may pass by itself (not a refused login or a bad DSN)."""
    return any(word in reason.lower() for word in _TRANSIENT)


def libpq_reason(message: str) -> str:
    """libpq's whole message on one line: its first line holds the cause ("Connection refused",
    "timeout expired", "password authentication failed"), later ones the hint."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("connection failed: "):
        lines[0] = lines[0][len("connection failed: "):]
    return "; ".join(lines) or "unknown error"


def scrub(text: str, dsn: str) -> str:
    """Remove the DSN's password from a message, should a driver ever echo it."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:
        password = None
    return text.replace(str(password), "****") if password else text


def jdbc_options(conn: psycopg.Connection) -> dict[str, str]:
    """Spark JDBC options for the server and database `conn` is connected to.

    The values are those libpq actually used (so ~/.pgpass and PG* variables work for
    Spark too); the password travels as an option, never inside the URL.
    """
    info = conn.info
    host = info.host if not info.host.startswith("/") else "localhost"
    params = info.get_parameters()
    url = f"jdbc:postgresql://{host}:{info.port}/{params['dbname']}"
    sslmode = params.get("sslmode")
    if sslmode and sslmode not in ("disable", "prefer", "allow"):
        url += f"?sslmode={sslmode}"
    options = {"url": url, "driver": "org.postgresql.Driver", "user": params["user"]}
    if info.password:
        options["password"] = info.password
    return options
