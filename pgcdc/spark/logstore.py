"""The Delta log store for tables in a local folder whose commits are put-if-absent across
processes (pgcdc/spark/java/LocalLinkLogStore.java), built with javac on first use.

Delta's LocalLogStore (its choice for `file:` paths) is documented as for testing: it checks
and renames under a lock of its own JVM, and a rename replaces an existing file, so a commit
of another Spark application (an OPTIMIZE) and one of pgcdc could both win the same version.
Ours publishes each commit file with link(2), which fails if the version exists.

    python -m pgcdc.spark.logstore     # builds the jar if needed and prints its path (for spark-submit --jars)
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from pgcdc.errors import SetupError

CLASS = "io.pgcdc.storage.LocalLinkLogStore"


def _delta_version() -> str:
    """The delta-storage version it is compiled against: the installed delta-spark's."""
    from importlib.metadata import version

    return version("delta-spark")


def _cache_dir() -> Path:
    return Path(os.environ.get("PGCDC_JAR_DIR") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                / "pgcdc")


def _source() -> str:
    return (resources.files("pgcdc.spark") / "java" / "LocalLinkLogStore.java").read_text()


def jar_path() -> Path:
    """Where the jar of this source and Delta version lives (whether built or not)."""
    digest = hashlib.sha256((_source() + _delta_version()).encode()).hexdigest()[:12]
    return _cache_dir() / f"pgcdc-logstore-{digest}.jar"


def _classpath() -> str:
    """delta-storage (from the Ivy cache Spark fills) and Hadoop's API (from pyspark's jars)."""
    import pyspark

    # (Spark 4 keeps its Ivy cache in ~/.ivy2.5.2, Spark 3.5 in ~/.ivy2)
    storage = [found for ivy in (".ivy2.5.2", ".ivy2") for found in
               glob.glob(str(Path.home() / ivy / "jars" / f"io.delta_delta-storage-{_delta_version()}.jar"))][:1]
    hadoop = glob.glob(str(Path(pyspark.__file__).parent / "jars" / "hadoop-client-api-*.jar"))
    if not storage or not hadoop:
        raise SetupError(f"cannot build pgcdc's Delta log store yet: delta-storage {_delta_version()} is not in the Ivy "
                         "cache (run `make setup`, or start Spark once with `python -m pgcdc.spark`)")
    return os.pathsep.join(storage + hadoop)


def _tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", name) if home and os.path.exists(os.path.join(home, "bin", name)) \
        else shutil.which(name)
    if not found:
        raise SetupError(f"`{name}` not found: building pgcdc's Delta log store needs a JDK "
                         "(apt-get install openjdk-17-jdk-headless, or set JAVA_HOME to one)")
    return found


def build() -> Path:
    """The jar, compiled now if it is not there yet."""
    target = jar_path()
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "LocalLinkLogStore.java"
        src.write_text(_source())
        classes = Path(tmp) / "classes"
        done = subprocess.run([_tool("javac"), "--release", "17", "-nowarn", "-cp", _classpath(), "-d", str(classes),
                               str(src)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SetupError(f"javac could not build pgcdc's Delta log store: {done.stderr.strip()[:500]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        done = subprocess.run([_tool("jar"), "cf", str(staged), "-C", str(classes), "."], capture_output=True, text=True)
        if done.returncode != 0:
            raise SetupError(f"`jar` could not package pgcdc's Delta log store: {done.stderr.strip()[:500]}")
        os.replace(staged, target)
    return target


if __name__ == "__main__":
    print(build())
