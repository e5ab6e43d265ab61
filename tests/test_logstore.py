"""Commits to a local table are put-if-absent across processes (pgcdc.spark.logstore)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pgcdc.spark import logstore

VERSIONS = 15


def test_sessions_commit_local_tables_through_pgcdcs_log_store(spark) -> None:
    assert spark.conf.get("spark.delta.logStore.file.impl") == logstore.CLASS
    assert str(logstore.build()) in spark.conf.get("spark.jars")


# Each application writes commit file `version` of one log through its Delta log store, all at
# the same moment (released together through a file), and records whether the store said it won.
_RACER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path

    def race(spark, log_dir, name, versions, out):
        from pgcdc.spark.jvm import seq
        jvm = spark._jvm
        store = jvm.org.apache.spark.sql.delta.storage.DelegatingLogStore(spark._jsc.hadoopConfiguration())
        conf = spark._jsc.hadoopConfiguration()
        won = []
        for v in range(versions):
            go = Path(log_dir) / f"go-{v}"
            while not go.exists():
                time.sleep(0.0005)
            target = jvm.org.apache.hadoop.fs.Path(f"file://{log_dir}/{v:020d}.json")
            try:
                store.write(target, seq(spark, [json.dumps({"commitInfo": {"writer": name}})]).iterator(), False, conf)
                won.append(v)
            except Exception as exc:
                if "FileAlreadyExists" not in str(exc):
                    raise
        Path(out).write_text(json.dumps(won))
""")


def test_two_applications_committing_one_version_at_once_have_one_winner(spark, tmp_path: Path) -> None:
    """Another Spark application (its own JVM) and this one write the same commit version at
    the same moment, again and again: exactly one may win each version, and the file holds
    the winner's commit. A store that checks, then renames (Delta's LocalLogStore, whose lock
    holds within one JVM) lets both win, one commit silently replacing the other."""
    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    ready = tmp_path / "ready"
    other = _RACER + textwrap.dedent(f"""
        from pgcdc.spark.session import get_session
        spark = get_session()
        Path({str(ready)!r}).touch()
        race(spark, {str(log_dir)!r}, "other", {VERSIONS}, {str(tmp_path / "other.json")!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", other], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the other application did not start"
        time.sleep(0.05)
    namespace: dict = {}
    exec(_RACER, namespace)
    releaser = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        for v in range({VERSIONS}):
            time.sleep(0.3)
            Path({str(log_dir)!r}, f"go-{{v}}").touch()
    """)])
    namespace["race"](spark, str(log_dir), "this", VERSIONS, str(tmp_path / "this.json"))
    releaser.wait()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    this, other_won = (set(json.loads((tmp_path / f"{n}.json").read_text())) for n in ("this", "other"))
    assert this & other_won == set(), f"both applications won versions {sorted(this & other_won)}"
    assert this | other_won == set(range(VERSIONS))
    for v in range(VERSIONS):
        writer = json.loads((log_dir / f"{v:020d}.json").read_text())["commitInfo"]["writer"]
        assert writer == ("this" if v in this else "other")
    assert not list(log_dir.glob(".*.tmp"))  # no temporary file left behind


def test_log_listing_equals_hadoops_and_reads_only_the_files_asked_for(spark, tmp_path: Path) -> None:
    """Delta lists a table's log from a version on at every snapshot update; pgcdc's store
    must answer exactly as Hadoop's listing does (names at or after the start, sorted, with
    sizes and times), whatever else the folder holds, and say a missing folder is missing."""
    from py4j.protocol import Py4JJavaError

    from pgcdc.spark.jvm import cls

    log = tmp_path / "_delta_log"
    log.mkdir()
    for v in range(0, 40):
        (log / f"{v:020d}.json").write_text("x" * v)
        (log / f"{v:020d}.crc").write_text("{}")
    (log / f"{30:020d}.checkpoint.parquet").write_bytes(b"p" * 7)
    (log / "_last_checkpoint").write_text("{}")
    (log / f".{39:020d}.json.123.tmp").write_text("partial")
    (log / "_commits").mkdir()
    conf = spark._jsc.hadoopConfiguration()
    ours = cls(spark, logstore.CLASS)(conf)
    hadoop = cls(spark, "io.delta.storage.LocalLogStore")(conf)

    def listing(store, start: str) -> list[tuple[str, int, int, bool]]:
        found, it = [], store.listFrom(spark._jvm.org.apache.hadoop.fs.Path(f"file:{log}/{start}"), conf)
        while it.hasNext():
            s = it.next()
            found.append((s.getPath().toString(), s.getLen(), s.getModificationTime() // 1000, s.isDirectory()))
        return found

    for start in (f"{0:020d}.", f"{30:020d}.", f"{30:020d}.checkpoint", f"{39:020d}.json", f"{99:020d}.", "_"):
        assert listing(ours, start) == listing(hadoop, start), start
    assert len(listing(ours, f"{30:020d}.")) == 2 * 10 + 1 + 2  # (versions 30-39, the checkpoint, _last_checkpoint, _commits)
    try:
        listing(ours, "missing/x")
        raise AssertionError("a missing folder was listed")
    except Py4JJavaError as exc:
        assert "FileNotFoundException" in str(exc.java_exception.getClass().getName())
