"""Key index: each data file's key columns, kept beside the table as an uncompressed Arrow file.

A small batch finds its old rows by searching the key column of every candidate file
(driver_marks). Read from Parquet, that column is decompressed and decoded on every
batch: most of the ~0.2 s a 10k batch spread over a 5M-row table spends there (2 cores).
The same column stored once as an uncompressed Arrow file is memory-mapped instead,
and only searched.

A copy is made when the driver writes a file, or the first time a batch reads a
file's key column, as
<table>/_pgcdc/keys/<file name>.arrow (VACUUM leaves folders starting with "_" alone),
written whole under a temporary name and renamed into place. It is used only while it
matches the data file it was made from (the file's size and modification time, and
the key columns' names, recorded in it): Delta never rewrites a data file in place,
but a copy that does not match, or does not read, is made again. A copy whose data file
is gone (VACUUM) is deleted by the next run (`prune`).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from pgcdc.lake import paths

if TYPE_CHECKING:
    import pyarrow as pa

FOLDER = os.path.join(paths.FOLDER, "keys")
_SUFFIX = ".arrow"


def index_path(table_dir: str, data_file: str) -> str | None:
    """Where the key index of `data_file` (a local path) lives; None for a file outside the table's folder."""
    relative = os.path.relpath(data_file, table_dir)
    if relative.startswith(".."):
        return None
    return os.path.join(table_dir, FOLDER, quote(relative, safe="") + _SUFFIX)


def _identity(data_file: str, columns: list[str]) -> dict[bytes, bytes]:
    info = os.stat(data_file)
    # (one column by its name, as indexes made before composite keys were indexed say it)
    named = columns[0] if len(columns) == 1 else json.dumps(columns)
    return {b"pgcdc.file_size": str(info.st_size).encode(), b"pgcdc.file_mtime_ns": str(info.st_mtime_ns).encode(),
            b"pgcdc.column": named.encode()}


def key_column(table_dir: str, data_file: str, column: str) -> "pa.ChunkedArray":
    """The `column` of the Parquet `data_file` (key_columns of one column)."""
    return key_columns(table_dir, data_file, [column]).column(0)


def key_columns(table_dir: str, data_file: str, columns: list[str]) -> "pa.Table":
    """The `columns` of the Parquet `data_file`, every physical row in file order (so a
    row's index is Delta's row index): from the key index if it matches the file, else
    from the file itself, and then the index is made for the next batch."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    index = index_path(table_dir, data_file)
    identity = _identity(data_file, columns)
    if index is not None and os.path.exists(index):
        try:
            stored = ipc.open_file(pa.memory_map(index)).read_all()
            if stored.schema.metadata == identity and stored.column_names == columns:
                return stored
        except (pa.ArrowException, OSError):
            pass  # unreadable (e.g. a disk full while it was written elsewhere): made again below
    keys = pq.read_table(data_file, columns=columns).select(columns)
    remember(table_dir, data_file, keys)
    return keys


def remember(table_dir: str, data_file: str, keys: "pa.Table") -> None:
    """Make the key index of `data_file` from its key columns `keys` (every row, in file
    order): after reading them from the file, or right after writing the file (driver_write)."""
    index = index_path(table_dir, data_file)
    if index is not None:
        _store(index, keys.replace_schema_metadata(_identity(data_file, keys.column_names)))


def _store(index: str, table: "pa.Table") -> None:
    """Write the index whole under a temporary name, then rename it into place; a failure
    (read-only folder, disk full) only means the next batch reads the Parquet file again."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    temp = f"{index}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(index), exist_ok=True)
        with pa.OSFile(temp, "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(temp, index)
    except (pa.ArrowException, OSError):
        try:
            os.unlink(temp)
        except OSError:
            pass


def prune(table_dir: str) -> int:
    """Delete the key indexes (and leftover temporary files) whose data file is gone; how many."""
    folder = os.path.join(table_dir, FOLDER)
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    removed = 0
    for name in names:
        gone = name.endswith(".tmp") or not (name.endswith(_SUFFIX) and
                                             os.path.exists(os.path.join(table_dir, unquote(name[:-len(_SUFFIX)]))))
        if gone:
            try:
                os.unlink(os.path.join(folder, name))
                removed += 1
            except OSError:
                pass
    return removed
