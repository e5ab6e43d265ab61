#!/usr/bin/env bash
# `make test`'s lint and suites, in two lanes. The main lane runs tests/ (PostgreSQL 15 on this image)
# but SIDE_FILES and SIDE_TESTS. The side lane runs, one after the other: `make lint`, the second Spark/Delta
# pair (compat.sh), PostgreSQL 18 (pg18.sh), and SIDE_FILES and SIDE_TESTS in a pytest of their
# own: tests that mostly wait on processes or servers they start (a standalone cluster, an
# installed wheel's spark-submit, another Spark application, followers, a standby, an S3 server)
# and schedules that sit idle between writers' pauses (and tests moved to even the lanes: in the
# last clean-clone run the main lane took 61 minutes, the side lane 47).
# The main lane leaves about a third of two cores idle (it waits on its servers, child JVMs and
# writers' pauses); the side lane uses that time instead of adding its ~30 minutes after it. Its
# output goes to .test-logs/ and is printed when the main lane ends. Arguments go to the main
# lane's pytest. Exit status: the first failing suite's.
set -uo pipefail
cd "$(dirname "$0")/.."
SIDE_FILES=(tests/test_cluster.py tests/test_packaging.py tests/test_catalog.py tests/test_follow.py tests/test_watch.py
            tests/test_reconcile.py tests/test_changed.py)
SIDE_TESTS=(tests/test_differential.py::test_delta_equals_postgres_on_object_storage
            tests/test_differential.py::test_delta_equals_postgres_reading_through_a_hot_standby
            tests/test_differential.py::test_delta_equals_postgres_with_a_fan_in
            tests/test_history.py::test_a_kill_between_the_mirror_and_its_history_is_made_good_by_the_next_run
            tests/test_history.py::test_a_resync_closes_what_it_no_longer_finds_and_opens_what_changed_without_rewriting_history)
SIDE=(lint compat pg18 side)
logs=.test-logs
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.status

side() {
  case $1 in
    lint) make --no-print-directory -o setup lint ;;  # (make test ran setup already)
    compat) bash scripts/compat.sh ;;
    pg18) bash scripts/pg18.sh ;;
    side) .venv/bin/pytest -p no:cacheprovider "${SIDE_FILES[@]}" "${SIDE_TESTS[@]}" ;;
  esac
}
(
  for name in "${SIDE[@]}"; do
    side "$name" > "$logs/$name.log" 2>&1
    echo $? > "$logs/$name.status"
  done
) &
lane=$!
# (a background job ignores the terminal's ^C: stop it with the main lane)
trap 'pkill -TERM -P $lane; exit 130' INT TERM
echo "[test] beside the main suite: make lint, scripts/compat.sh, scripts/pg18.sh, then ${SIDE_FILES[*]} ${SIDE_TESTS[*]} (logs: $logs/)"

ignore=()
for f in "${SIDE_FILES[@]}"; do ignore+=(--ignore "$f"); done
for t in "${SIDE_TESTS[@]}"; do ignore+=(--deselect "$t"); done
.venv/bin/pytest "${ignore[@]}" "$@"
statuses=($?)
if kill -0 "$lane" 2>/dev/null; then echo "[test] main suite done; waiting for the side lane"; fi
wait "$lane"
summary="main suite: exit ${statuses[0]}"
for name in "${SIDE[@]}"; do
  echo "================================ side lane: $name ================================"
  cat "$logs/$name.log"
  status=$(cat "$logs/$name.status" 2>/dev/null || echo 1)
  statuses+=("$status")
  summary+="; $name: exit $status"
done
echo "[test] $summary"
for status in "${statuses[@]}"; do
  [ "$status" = 0 ] || exit "$status"
done
