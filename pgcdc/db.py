"""PostgreSQL connections with errors a person can act on and no secrets in them."""

from __future__ import annotations

import psycopg
from pydantic import SecretStr

from pgcdc.errors import SourceError
from pgcdc.settings import masked_dsn


def connect(dsn: SecretStr | str, *, role: str = "source.dsn", autocommit: bool = True) -> psycopg.Connection:
    """Open a connection; a failure becomes a one-line SourceError naming the setting to fix."""
    raw = dsn.get_secret_value() if isinstance(dsn, SecretStr) else dsn
    try:
        return psycopg.connect(raw, autocommit=autocommit, connect_timeout=10, application_name="pgcdc")
    except psycopg.ProgrammingError as exc:  # malformed conninfo
        raise SourceError(f"{role} is not a valid PostgreSQL DSN ({scrub(str(exc), raw)}); "
                          "use 'host=... dbname=... user=...' or postgresql://user@host/db") from None
    except psycopg.OperationalError as exc:
        reason = libpq_reason(scrub(str(exc), raw))
        raise SourceError(f"cannot connect to PostgreSQL via {role} ({masked_dsn(raw)}): {reason}; "
                          "check host, port, user and password") from None


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
