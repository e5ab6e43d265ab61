"""A Delta table's log read as files, as Delta's protocol documents it (PROTOCOL.md): the
newest version, its metadata and protocol, and the consumers' `txn` versions.

Both engines read a table's state through here, so neither needs Delta's internal
classes for it. The newest version's checksum file (`<version>.crc`, "Version Checksum
File") answers in a few milliseconds: its `metadata` and `protocol` are required fields,
its `setTransactions` (and `allFiles`) optional ones that delta-spark 4 writes. Where a
field is missing, the log is replayed: the newest complete checkpoint (read with Spark's
Parquet reader, or as JSON for a V2 checkpoint in JSON) and the commit files after it.
Local tables are read with Python's file functions, others through Hadoop's FileSystem.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pgcdc.errors import TargetError
from pgcdc.lake.paths import local_folder
from pgcdc.spark.jvm import cls

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?(?:\.[^.]+)?\.(parquet|json)")


@dataclass
class LogState:
    """What pgcdc reads of a table's newest version (-1: no table)."""

    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)
    txns: dict[str, int] | None = None  # appId -> version; None if not read (replay_txns reads them)
    all_files: dict[str, int] | None = None  # data file path -> size in bytes, as the checksum lists them, if it does
    num_files: int | None = None  # data files of the version (from its checksum)
    table_bytes: int | None = None  # their total size (from its checksum)

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.metadata.get("configuration") or {})

    def schema(self) -> "StructType":
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.metadata["schemaString"]))


def _local(path: str) -> str | None:
    folder = local_folder(path)
    return None if folder is None else str(folder)


def _hadoop(spark: "SparkSession", path: str) -> tuple[Any, Any]:
    p = cls(spark, "org.apache.hadoop.fs.Path")(path)
    return p, p.getFileSystem(spark._jsc.hadoopConfiguration())


def _names(spark: "SparkSession", log: str) -> list[str]:
    """The file names in the log folder (none if it does not exist)."""
    local = _local(log)
    if local is not None:
        try:
            return os.listdir(local)
        except FileNotFoundError:
            return []
    p, fs = _hadoop(spark, log)
    if not fs.exists(p):
        return []
    return [s.getPath().getName() for s in fs.listStatus(p)]


def _read(spark: "SparkSession", file: str) -> str | None:
    """A log file's text; None if it does not exist."""
    local = _local(file)
    if local is not None:
        try:
            with open(local, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None
    from py4j.protocol import Py4JJavaError

    p, fs = _hadoop(spark, file)
    try:
        stream = fs.open(p)
    except Py4JJavaError as exc:
        if "FileNotFoundException" in str(exc.java_exception.getClass().getName()):
            return None
        raise
    try:
        return str(cls(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8"))
    finally:
        stream.close()


def _log(path: str) -> str:
    return f"{path.rstrip('/')}/_delta_log"


def _newest_listed(names: list[str]) -> int:
    """The newest commit among a log folder's file names (-1: none)."""
    return max((int(m.group(1)) for n in names if (m := _COMMIT.fullmatch(n))), default=-1)


# Local log folder -> the newest version seen there: where to start looking the next time.
_seen: dict[str, int] = {}


def _newest_local(log: str) -> int:
    """The newest commit of a local log without listing it: commit files are numbered without
    gaps, so from a version whose commit exists (the newest seen before) the newest is the last
    one before the first missing file. A followed table's log grows by two files a commit until
    Delta's log cleanup (30 days by default): a listing would cost more with every commit."""
    known = _seen.get(log)
    if known is None or not os.path.exists(f"{log}/{known:020d}.json"):
        try:
            known = _newest_listed(os.listdir(log))
        except FileNotFoundError:
            known = -1
        if known < 0:
            _seen.pop(log, None)
            return -1
    while os.path.exists(f"{log}/{known + 1:020d}.json"):
        known += 1
    _seen[log] = known
    return known


def latest_version(spark: "SparkSession", path: str) -> int:
    """The table's newest committed version; -1 where there is no table."""
    local = _local(_log(path))
    return _newest_local(local) if local is not None else _newest_listed(_names(spark, _log(path)))


def read_state(spark: "SparkSession", path: str, need_txns: bool = True) -> LogState:
    """The newest version's metadata and protocol (and `txn` versions if `need_txns`): from its
    checksum file where it has them, else by replaying the log."""
    version = latest_version(spark, path)
    if version < 0:
        return LogState(-1)
    text = _read(spark, f"{_log(path)}/{version:020d}.crc")
    try:
        crc = json.loads(text) if text else None
    except ValueError:
        crc = None
    if isinstance(crc, dict) and crc.get("metadata") and crc.get("protocol") \
            and (not need_txns or isinstance(crc.get("setTransactions"), list)):
        txns = {t["appId"]: int(t["version"]) for t in crc.get("setTransactions") or []}
        files = crc.get("allFiles")
        return LogState(version, crc["metadata"], crc["protocol"], txns if need_txns else None,
                        {f["path"]: int(f.get("size") or 0) for f in files} if isinstance(files, list) else None,
                        _count(crc.get("numFiles")), _count(crc.get("tableSizeBytes")))
    return _replay(spark, path, _names(spark, _log(path)), version)


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def _replay(spark: "SparkSession", path: str, names: list[str], version: int) -> LogState:
    """The newest version's state from the newest complete checkpoint and the commits after it."""
    state = LogState(version, txns={})
    start = 0
    for cp_version, files in _checkpoints(names, version):
        actions = _checkpoint_actions(spark, [f"{_log(path)}/{f}" for f in files])
        if actions is not None:
            for action in actions:
                _take(state, action)
            start = cp_version + 1
            break
    for v in range(start, version + 1):
        text = _read(spark, f"{_log(path)}/{v:020d}.json")
        if text is None:
            raise TargetError(f"the Delta log of {path} lacks commit {v} and has no checkpoint after it; the "
                              "table cannot be read (was its _delta_log edited?)")
        for line in text.splitlines():
            if line.strip():
                _take(state, json.loads(line))
    return state


def _take(state: LogState, action: dict[str, Any]) -> None:
    if action.get("txn"):
        assert state.txns is not None
        state.txns[action["txn"]["appId"]] = int(action["txn"]["version"])
    if action.get("metaData"):
        state.metadata = action["metaData"]
    if action.get("protocol"):
        state.protocol = action["protocol"]


def _checkpoints(names: list[str], version: int) -> list[tuple[int, list[str]]]:
    """Complete checkpoints at or below `version`, newest first, with their files."""
    found: dict[tuple[int, str], list[str]] = {}
    parts: dict[tuple[int, str], int] = {}
    for name in names:
        m = _CHECKPOINT.fullmatch(name)
        if m and int(m.group(1)) <= version:
            kind = "multi" if m.group(2) else name  # a classic or V2 checkpoint is one file of its own
            found.setdefault((int(m.group(1)), kind), []).append(name)
            parts[(int(m.group(1)), kind)] = int(m.group(3) or 1)
    complete = [(v, sorted(files)) for (v, kind), files in found.items() if len(files) == parts[(v, kind)]]
    return sorted(complete, key=lambda c: -c[0])


def _checkpoint_actions(spark: "SparkSession", files: list[str]) -> list[dict[str, Any]] | None:
    """The txn, metaData and protocol actions of a checkpoint (a V2 checkpoint's sidecars hold
    only file actions); None if it cannot be read."""
    if all(f.endswith(".json") for f in files):
        actions = []
        for f in files:
            text = _read(spark, f)
            if text is None:
                return None
            actions += [json.loads(line) for line in text.splitlines() if line.strip()]
        return actions
    from pyspark.sql import functions as F

    try:
        frame = spark.read.parquet(*files)
        wanted = [c for c in ("txn", "metaData", "protocol") if c in frame.columns]
        rows = frame.where(" or ".join(f"{c} is not null" for c in wanted)).select(
            *[F.to_json(F.col(c)).alias(c) for c in wanted]).collect()
    except Exception:  # (a checkpoint being written, or damaged: the commits serve)
        return None
    return [{c: json.loads(r[c]) for c in wanted if r[c] is not None} for r in rows]


def commit_info(spark: "SparkSession", path: str, version: int) -> dict[str, Any]:
    """The `commitInfo` action of commit `version` (empty if the commit has none or is gone)."""
    text = _read(spark, f"{_log(path)}/{version:020d}.json") or ""
    for line in text.splitlines():
        if '"commitInfo"' in line:
            info = json.loads(line).get("commitInfo")
            if isinstance(info, dict):
                return info
    return {}


def commit_actions(spark: "SparkSession", path: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit `version`; None if the log no longer holds it."""
    text = _read(spark, f"{_log(path)}/{version:020d}.json")
    return None if text is None else [json.loads(line) for line in text.splitlines() if line.strip()]


def writes_since(spark: "SparkSession", path: str, app_id: str, limit: int = 100, siblings: str = "") -> list[str]:
    """The commits after `app_id`'s last one that changed rows (data-changing file actions: not
    OPTIMIZE, VACUUM or a property change), newest first, as "OPERATION at version V"; not those
    of txn appIds starting with `siblings` (a fan-in's other sources). At most `limit` commits are
    read back (and none the log no longer holds)."""
    newest = latest_version(spark, path)
    found = []
    for version in range(newest, max(newest - limit, -1), -1):
        actions = commit_actions(spark, path, version)
        if actions is None or any((a.get("txn") or {}).get("appId") == app_id for a in actions):
            break
        if siblings and any(str((a.get("txn") or {}).get("appId", "")).startswith(siblings) for a in actions):
            continue
        if any(isinstance(a.get(kind), dict) and a[kind].get("dataChange", True) for a in actions
               for kind in ("add", "remove")):
            operation = next((a["commitInfo"].get("operation") for a in actions if a.get("commitInfo")), None)
            found.append(f"{operation or 'a commit'} at version {version}")
    return found


def txn_version(spark: "SparkSession", path: str, app_id: str) -> int:
    """The version of `app_id`'s last idempotent write (Delta `txn` action); -1 if none."""
    txns = read_state(spark, path).txns or {}
    return txns.get(app_id, -1)


def added_missing(spark: "SparkSession", path: str, version: int, limit: int = 3) -> list[str]:
    """Files commit `version` adds (data files and deletion vectors) that are gone from a local
    folder: an outside VACUUM with its retention check off ran while the commit's batch was
    written, when its files were nobody's yet. A table elsewhere is not checked (empty list)."""
    folder = _local(path)
    if folder is None:
        return []
    files = []
    for action in commit_actions(spark, path, version) or []:
        add = action.get("add")
        if isinstance(add, dict):
            files.append(_data_file(folder, add["path"]))
            dv = add.get("deletionVector") or {}
            if dv.get("storageType") == "u":
                files.append(_vector_file(folder, dv["pathOrInlineDv"]))
    return _gone(files, limit)


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _vector_file(folder: str, encoded: str) -> str:
    """A deletion vector's file (storage type `u`: an optional folder prefix, then the file's
    UUID in Z85), as Delta's protocol defines it."""
    prefix, z85 = encoded[:-20], encoded[-20:]
    raw = b"".join(sum(_Z85.index(c) * 85 ** (4 - i) for i, c in enumerate(z85[n:n + 5])).to_bytes(4, "big")
                   for n in range(0, 20, 5))
    return os.path.join(folder, prefix, f"deletion_vector_{uuid.UUID(bytes=raw)}.bin")


def _data_file(folder: str, listed: str) -> str:
    """A data file's local path: paths in an AddFile are URL-encoded, relative to the table unless absolute."""
    return unquote(urlparse(listed).path) if ":" in listed else os.path.join(folder, unquote(listed))


def missing_files(spark: "SparkSession", path: str, limit: int = 3) -> list[str]:
    """Data files the table's newest version references that are gone from a local folder (a
    VACUUM by another tool with its retention check off, run while a batch was being written,
    deletes the batch's new files before it commits them; a person deleting files). The file
    list comes from the checksum file (its `allFiles`), else from public API
    (DataFrame.inputFiles: ~150 ms a table); a table elsewhere is not checked (empty list)."""
    folder = _local(path)
    if folder is None:
        return []
    listed = read_state(spark, path, need_txns=False).all_files
    if listed is not None:
        files = [_data_file(folder, f) for f in listed]
    else:  # (Hadoop's Path prints the path as it is, not URL-encoded)
        files = [uri.removeprefix("file:") for uri in spark.read.format("delta").load(path).inputFiles()]
    return _gone(files, limit)


def listed_missing(path: str, limit: int = 3) -> list[str] | None:
    """missing_files without Spark (for `pgcdc status`): from the newest checksum file's
    `allFiles` of a table in a local folder; None where that cannot tell (a table elsewhere or
    not here, a checksum that does not list the files)."""
    folder = _local(path)
    log = _local(_log(path))
    version = _newest_local(log) if log is not None else -1
    if folder is None or log is None or version < 0:
        return None
    try:
        with open(f"{log}/{version:020d}.crc", encoding="utf-8") as f:
            files = json.load(f).get("allFiles")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, list):
        return None
    return _gone([_data_file(folder, f["path"]) for f in files], limit)


def _gone(files: list[str], limit: int) -> list[str]:
    gone = []
    for file in files:
        if not os.path.exists(file):
            gone.append(os.path.basename(file))
            if len(gone) >= limit:
                break
    return gone
