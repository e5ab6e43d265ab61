"""Where things lie: a table's Delta table under `target.root`, a local table's folder, pgcdc's
own folder beside a table's data, names as Spark identifiers. No I/O but the root's check."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from pgcdc.errors import TargetError
from pgcdc.spark.storage import check_scheme

# pgcdc's own files beside a table's data (state copies, key indexes): VACUUM leaves "_" folders alone
FOLDER = "_pgcdc"


def local_folder(path: str) -> Path | None:
    """The folder of a table on the local file system (plain path or file:// URI); None elsewhere."""
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(urlparse(path).path if path.startswith("file://") else path)


def check_target_root(root: str) -> str:
    """Check that a local target root can hold Delta tables (it is made if missing); return
    what was checked. TargetError if not. A remote root (s3a://) is checked through Spark
    (pgcdc.spark.storage.check_root)."""
    check_scheme(root)
    folder = local_folder(root)
    if folder is None:
        return f"{root} (remote: checked once Spark starts)"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".pgcdc-check-"):
            pass
    except OSError as exc:
        raise TargetError(f"target.root {root} is not writable ({exc.strerror}); make it writable for this user "
                          "or point target.root elsewhere") from None
    return f"{folder.resolve()} (writable)"


def target_path(root: str, table: str) -> str:
    """Where a table lands: <root>/<schema>.<table>, names as in PostgreSQL (unquoted);
    a relative local root is taken from the current directory."""
    schema, name = split_name(table)
    folder = f"{schema}.{name}".replace("/", "%2F")
    return f"{target_root(root)}/{folder}"


def target_root(root: str) -> str:
    """The folder or URI every table's Delta table lies under (a relative local root resolved)."""
    return (root if "://" in root else str(Path(root).resolve())).rstrip("/")


def split_name(table: str) -> tuple[str, str]:
    """Split a canonical 'schema.table' name (either part may be "quoted") into raw names."""
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."]+)', table)
    names = [q.replace('""', '"') if q else p for q, p in parts]
    if len(names) != 2:
        raise ValueError(f"not a schema-qualified table name: {table}")
    return names[0], names[1]


def spark_ident(name: str) -> str:
    """`name` as a Spark SQL identifier (a column, or a delta.`path`)."""
    return "`" + name.replace("`", "``") + "`"
