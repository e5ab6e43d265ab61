#!/usr/bin/env bash
# Install everything pgcdc needs on a fresh Debian-like machine; safe to re-run.
#   - Python 3.11+ virtualenv in .venv with pgcdc (editable) and the test tools
#   - Java 17+ JDK (installed from Debian if missing and we are root)
#   - PostgreSQL server binaries (Debian's postgresql package if missing; no cluster is created)
#   - Spark's Delta Lake and PostgreSQL JDBC jars, resolved once from Maven Central into the Ivy cache
#   - pgcdc's Delta log store for local tables, compiled once with javac (~/.cache/pgcdc)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }
apt_updated=
apt_install() {
  command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq || die "apt-get update failed (need root)"; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

. "$(dirname "$0")/pyinstall.sh"  # pyinstall VENV ARGS...: uv where it can, else pip

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || die "Python 3.11+ is required (found: $("$PY" --version 2>&1 || echo none)); set PYTHON=/path/to/python3.11"

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }
# a JDK, not just a runtime: javac builds pgcdc's Delta log store (pgcdc/spark/logstore.py)
if ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ] || ! command -v javac >/dev/null; then
  say "Java 17+ JDK not found; installing openjdk-17-jdk-headless"
  apt_install openjdk-17-jdk-headless
fi
say "java $(java_major) ok"

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
  say "PostgreSQL server not found; installing Debian's postgresql (without a default cluster)"
  as_root mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | as_root tee /etc/postgresql-common/createcluster.d/pgcdc.conf >/dev/null
  apt_install postgresql postgresql-client
fi
say "postgres server binaries ok"

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.pgcdc-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing Python packages (pyspark, delta-spark, psycopg, pyarrow, numpy, pydantic-settings, pytest, chispa)"
  pyinstall .venv -e ".[test,local]"
  touch "$stamp"
fi
say "python packages ok"

# pyspark's spark-submit finds Spark (and runs the job) with the `python3` on PATH: from a shell
# without the venv activated, that is not this venv's. Wrap it so `.venv/bin/spark-submit` uses
# this venv's Python wherever it is called from (pip's own script kept as spark-submit.pyspark).
if ! grep -q "pgcdc (scripts/setup.sh)" .venv/bin/spark-submit; then
  mv .venv/bin/spark-submit .venv/bin/spark-submit.pyspark
  cat > .venv/bin/spark-submit <<'WRAP'
#!/usr/bin/env bash
# pgcdc (scripts/setup.sh): pyspark's spark-submit (spark-submit.pyspark) with this venv's Python
here="$(cd "$(dirname "$0")" && pwd)"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$here/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}"
exec "$here/spark-submit.pyspark" "$@"
WRAP
  chmod +x .venv/bin/spark-submit
fi

say "resolving Spark jars (Delta Lake, PostgreSQL JDBC); downloads only on the first run"
.venv/bin/python -m pgcdc.spark >/dev/null 2>.venv/jars.log || { tail -n 20 .venv/jars.log >&2; die "could not start Spark with Delta (log: .venv/jars.log)"; }
say "spark + delta ok"
.venv/bin/python -m pgcdc.spark.logstore >/dev/null || die "could not build pgcdc's Delta log store (pgcdc/spark/logstore.py)"
say "pgcdc log store ok"
