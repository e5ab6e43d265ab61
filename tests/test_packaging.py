"""The wheel ships the whole package: every module, the SQL and the log store's Java source
(a module left out of pyproject.toml's package list works in the editable checkout and fails
only where the wheel is installed), and builds without setuptools warnings."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from fixtures.wheel import REPO, build_wheel



def _plain_env() -> dict[str, str]:
    """A shell's environment without any virtualenv on PATH and no PYSPARK_PYTHON."""
    import os

    env = {k: v for k, v in os.environ.items() if k in ("HOME", "JAVA_HOME", "LANG", "TMPDIR")}
    return env | {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def _config(tmp_path: Path, syncer) -> Path:
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n')
    return cfg


def _attach_table(db) -> None:
    from pgcdc.source import capture

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'v' || i from generate_series(1, 20) i")
    capture.attach(db, "t")


def _check(syncer) -> None:
    import psycopg

    with psycopg.connect(syncer.dsn) as conn:
        want = set(conn.execute("select id, v from t").fetchall())
    assert {tuple(r) for r in syncer.delta("public.t").select("id", "v").collect()} == want


def test_wheel_holds_every_module_sql_file_and_java_source(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {str(p.relative_to(REPO)) for p in (REPO / "pgcdc").rglob("*") if p.suffix in (".py", ".java")}
    want |= {"pgcdc/sql/" + str(p.relative_to(REPO / "sql")) for p in (REPO / "sql").rglob("*")
             if p.suffix in (".sql", ".txt")}
    assert want - names == set()


def test_spark_submit_runs_the_packaged_job_from_anywhere_without_the_venv_activated(db, syncer, tmp_path: Path) -> None:
    """The documented line, from a directory outside the checkout, in a shell whose PATH has no
    venv and no PYSPARK_PYTHON: `.venv/bin/spark-submit $(.venv/bin/pgcdc --config F submit-args)
    --config F` syncs the table (the job file is the package's own pgcdc/cli/job.py)."""
    import shlex

    _attach_table(db)
    cfg = _config(tmp_path, syncer)
    bin_dir = Path(sys.executable).parent
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    args = subprocess.run([str(bin_dir / "pgcdc"), "--config", str(cfg), "submit-args"], cwd=outside, env=_plain_env(),
                          capture_output=True, text=True, check=True).stdout
    assert shlex.split(args)[-1].endswith("pgcdc/cli/job.py")
    proc = subprocess.run([str(bin_dir / "spark-submit"), *shlex.split(args), "--config", str(cfg)], cwd=outside,
                          env=_plain_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "public.t: copied 20 rows" in proc.stdout + proc.stderr
    _check(syncer)


def test_installed_wheel_runs_the_job_with_no_checkout(db, syncer, tmp_path: Path) -> None:
    """`pip install pgcdc-*.whl[local]` into a fresh virtualenv; from another directory, with
    nothing of the checkout on any path, `<venv>/bin/pgcdc --config F submit` runs the job
    through spark-submit and syncs the table."""
    import venv

    wheel = build_wheel(tmp_path / "dist")
    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=True)
    subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", f"{wheel}[local]"], check=True, capture_output=True)
    _attach_table(db)
    cfg = _config(tmp_path, syncer)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    proc = subprocess.run([str(env_dir / "bin" / "pgcdc"), "--config", str(cfg), "submit"], cwd=outside,
                          env=_plain_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "public.t: copied 20 rows" in proc.stdout + proc.stderr
    assert str(REPO) not in proc.stdout + proc.stderr  # (nothing ran from the checkout)
    _check(syncer)
