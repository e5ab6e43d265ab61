#!/usr/bin/env bash
# `make test`'s three suites. The main one (the whole of tests/, PostgreSQL 15 on this image) runs
# in the foreground; beside it, one after the other, the second Spark/Delta pair (compat.sh) and
# PostgreSQL 18 (pg18.sh). The main suite leaves about a third of two cores idle (it waits on its
# servers, on child JVMs and on writers' pauses); the other two use that time instead of adding
# ~10 minutes after it. Their output goes to .test-logs/ and is printed when the main suite ends.
# Exit status: the first failing suite's.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=.test-logs
mkdir -p "$logs"
rm -f "$logs"/compat.log "$logs"/pg18.log

(
  bash scripts/compat.sh > "$logs/compat.log" 2>&1; compat=$?
  bash scripts/pg18.sh > "$logs/pg18.log" 2>&1; pg18=$?
  echo "$compat $pg18" > "$logs/beside.status"
) &
beside=$!
# (a background job ignores the terminal's ^C: stop it with the main suite)
trap 'pkill -TERM -P $beside; exit 130' INT TERM
echo "[test] scripts/compat.sh then scripts/pg18.sh run beside the main suite (logs: $logs/)"

.venv/bin/pytest "$@"
main=$?
if kill -0 "$beside" 2>/dev/null; then echo "[test] main suite done; waiting for compat.sh and pg18.sh"; fi
wait "$beside"
read -r compat pg18 < "$logs/beside.status" || { compat=1; pg18=1; }
for name in compat pg18; do
  echo "================================ scripts/$name.sh ================================"
  cat "$logs/$name.log"
done
echo "[test] main suite: exit $main; compat.sh: exit $compat; pg18.sh: exit $pg18"
for status in "$main" "$compat" "$pg18"; do
  [ "$status" = 0 ] || exit "$status"
done
