#!/usr/bin/env bash
# The second supported pair: the merge engine's tests, column changes in place and one randomized schedule on
# pyspark 3.5 + delta-spark 3.3 (Scala 2.12), in a virtualenv of its own (.venv-compat).
# On that Delta build the fast engine is untested: `auto` applies every table with merge. The
# schedule (seed 11: the bank, kills, soft deletes, metadata columns) keeps the mirror without a
# history (CI time: each table's fold costs seconds a run); tests/test_history.py feeds a history
# with either engine, and `PGCDC_PLAIN_SHAPES= bash scripts/compat.sh` plays what the seed draws.
# Run by `make test` beside the main suite (scripts/suite.sh; `make` sets up Java, PostgreSQL
# and the main .venv first).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=("pyspark>=3.5.3,<3.6" "delta-spark>=3.3,<3.4")
say() { printf '[compat] %s\n' "$*"; }
. "$(dirname "$0")/pyinstall.sh"

PY=${PYTHON:-python3}
[ -x .venv-compat/bin/python ] || { say "creating .venv-compat"; "$PY" -m venv .venv-compat; }
stamp=.venv-compat/.pgcdc-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  say "installing ${PAIR[*]} and pgcdc's other dependencies"
  # pgcdc's own dependencies (pyproject.toml) but for the pinned pyspark/delta-spark pair
  .venv-compat/bin/python - > .venv-compat/requirements.txt <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for dep in project["dependencies"] + project["optional-dependencies"]["test"]:
    if not dep.startswith(("pyspark", "delta-spark")):
        print(dep)
PYEOF
  pyinstall .venv-compat -r .venv-compat/requirements.txt "${PAIR[@]}"
  pyinstall .venv-compat --no-deps -e .
  touch "$stamp"
fi
say "$(.venv-compat/bin/python -c 'from importlib.metadata import version as v; print("pyspark", v("pyspark"), "+ delta-spark", v("delta-spark"))')"
.venv-compat/bin/python -m pgcdc.spark >/dev/null 2>.venv-compat/jars.log || { tail -n 20 .venv-compat/jars.log >&2; exit 1; }
PGCDC_SEED=${PGCDC_SEED:-11} PGCDC_PLAIN_SHAPES=${PGCDC_PLAIN_SHAPES:-history} exec .venv-compat/bin/pytest -p no:cacheprovider tests/test_engines.py \
  tests/test_batches.py tests/test_differential.py tests/test_columns_in_place.py \
  -k "test_engines or small_files or (random_schedule and out_of_order) or in_place" "$@"
