"""Small files pgcdc keeps beside a Delta table's data, in <table>/_pgcdc/ (VACUUM skips folders
starting with "_"): the consumer state's copy (lake/state.py) and the last comparison's record
(lake/verified.py). In a local folder a file is written whole and renamed into place (no Py4J,
no helper process); elsewhere through Hadoop's file system."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgcdc.lake.paths import FOLDER, local_folder
from pgcdc.spark.jvm import cls

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _local(path: str, name: str) -> Path | None:
    """The file of a table in a local folder; None elsewhere."""
    folder = local_folder(path)
    return folder / FOLDER / name if folder is not None else None


def _remote(spark: "SparkSession", path: str, name: str) -> tuple[Any, Any]:
    """The file's Hadoop path and its file system (JVM objects)."""
    file = cls(spark, "org.apache.hadoop.fs.Path")(f"{path.rstrip('/')}/{FOLDER}/{name}")
    return file, file.getFileSystem(spark._jsc.hadoopConfiguration())


def write_text(spark: "SparkSession", path: str, name: str, text: str) -> None:
    """Write the file `name` beside the table at `path`, replacing it whole."""
    local = _local(path, name)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        staged = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, local)
        return
    file, fs = _remote(spark, path, name)
    out = fs.create(file, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


def read_text(spark: "SparkSession | None", path: str, name: str) -> str | None:
    """The file `name` beside the table; None if absent or unreadable, or (without `spark`:
    `pgcdc status`, which starts no Spark) if the table lies elsewhere than a local folder."""
    from py4j.protocol import Py4JJavaError

    local = _local(path, name)
    if local is not None:
        try:
            return local.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
    if spark is None:
        return None
    file, fs = _remote(spark, path, name)
    try:
        if not fs.exists(file):
            return None
        stream = fs.open(file)
        try:
            return str(cls(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8"))
        finally:
            stream.close()
    except Py4JJavaError:  # e.g. a checksum error after a hand edit
        return None


def remove(spark: "SparkSession", path: str, name: str) -> None:
    """Delete the file `name` beside the table, if there."""
    local = _local(path, name)
    if local is not None:
        local.unlink(missing_ok=True)
        return
    file, fs = _remote(spark, path, name)
    fs.delete(file, False)
