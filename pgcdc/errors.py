"""The pgcdc error tree.

Every error pgcdc raises on purpose is a PgcdcError; each subclass also inherits
the built-in exception that fits, so callers may catch either. Messages name the
object at fault and say what to do next; they never contain secrets.

    PgcdcError
    ├── ConfigError      (ValueError)       invalid or missing settings
    ├── SetupError       (RuntimeError)     Java, PostgreSQL binaries or jars missing
    ├── SourceError      (ConnectionError)  cannot reach or log in to PostgreSQL
    ├── SchemaError      (RuntimeError)     pgcdc schema missing or of another version
    ├── TableError       (LookupError)      unknown table, no primary key, not attached
    ├── TargetError      (RuntimeError)     Delta table unusable (other consumer, schema drift)
    └── BusyError        (RuntimeError)     another job holds the consumer
"""


class PgcdcError(Exception):
    """Base of every error pgcdc raises on purpose."""


class ConfigError(PgcdcError, ValueError):
    """Settings are invalid or a config file is missing."""


class SetupError(PgcdcError, RuntimeError):
    """The machine lacks something pgcdc needs (Java 17+, PostgreSQL binaries, jars)."""


class SourceError(PgcdcError, ConnectionError):
    """PostgreSQL cannot be reached or refuses the login."""


class SchemaError(PgcdcError, RuntimeError):
    """The pgcdc schema is not installed, or its version differs from the package's."""


class TableError(PgcdcError, LookupError):
    """A table is unknown, has no primary key, or is not attached."""


class TargetError(PgcdcError, RuntimeError):
    """A Delta target cannot be written safely (owned elsewhere, incompatible schema)."""


class BusyError(PgcdcError, RuntimeError):
    """Another job is already running for the same consumer."""
