#!/usr/bin/env bash
# `make test`: every check and every test, stage by stage, each timed. The summary prints each
# stage's time and the total, and fails loudly when the total passes the standing limit (45
# minutes for a fresh machine, Debian packages, venv and Go builds included; TEST_LIMIT_S moves
# it).
#
# pytest runs in three lanes, each printing its slowest tests:
#   pure      no database, no Redis, no cluster (conftest.py marks them), first: seconds;
#   database  PostgreSQL and the cache only, in two xdist workers, each with its own test
#             database, cache prefix (portal/settings/test.py) and broker database, beside
#   cluster   the local cluster, Celery workers and the shared Redis: one process, one test at a
#             time (they share the cluster's queues, nodes and Kueue's settings);
#   pods      the portal's own image and Helm chart as pods on the cluster's real node, after
#             the cluster lane (the same cluster).
# The database lane's output is kept in .local/test-lanes/database.log and printed when both end.
set -uo pipefail
cd "$(dirname "$0")/.."

LIMIT_S=${TEST_LIMIT_S:-2700}
start_all=$(date +%s)
names=()
seconds=()
failed=()

stage() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@"
  rc=$?
  names+=("$name")
  seconds+=($(($(date +%s) - t0)))
  [ "$rc" -eq 0 ] || failed+=("$name")
  return "$rc"
}

summary() {
  local total=$(($(date +%s) - start_all)) i
  printf '\n==> make test, by stage\n'
  for i in "${!names[@]}"; do
    printf '  %-18s %4d s  %s\n' "${names[$i]}" "${seconds[$i]}" \
      "$([[ " ${failed[*]} " == *" ${names[$i]} "* ]] && echo FAILED)"
  done
  [[ " ${names[*]} " == *" pytest-database "* ]] &&
    printf '  (the database lane ran beside the cluster lane: the total is not the sum)\n'
  printf '  %-18s %4d s  (%d min %02d s; the limit is %d min)\n' total "$total" \
    $((total / 60)) $((total % 60)) $((LIMIT_S / 60))
  if [ "$total" -gt "$LIMIT_S" ]; then
    printf '\033[1;31m==> OVER THE LIMIT: make test took %d s, more than %d s. Find the slow stage above and the slowest tests in pytest'"'"'s table.\033[0m\n' "$total" "$LIMIT_S"
    return 1
  fi
  [ ${#failed[@]} -eq 0 ] || { printf '\033[1;31m==> failed: %s\033[0m\n' "${failed[*]}"; return 1; }
  printf '==> make test passed\n'
}

m() { make --no-print-directory "$@"; }

# Nothing else can run without these two.
stage setup m setup && stage cluster .venv/bin/python -m localcluster up || { summary; exit 1; }
for target in lint layers typecheck migrations-check deploy-check chart; do
  stage "$target" m "$target"
done

SERIAL="cluster or celery or redis"
lane() {
  local name=$1
  shift
  .venv/bin/python -m pytest --ds=portal.settings.test -p no:cacheprovider --durations=15 \
    --junitxml="$lanes/$name.xml" "$@"
  local rc=$?
  [ "$rc" -eq 5 ] && echo "pytest collected no tests in this lane: failing on purpose" && rc=1
  return "$rc"
}
database_lane() {
  # its own broker database: a task a test queues never reaches the cluster lane's worker
  TEST_CELERY_BROKER_URL=redis://127.0.0.1:6379/13 \
    lane database -n 2 -m "not pure and not ($SERIAL)" >"$lanes/database.log" 2>&1
}

lanes=.local/test-lanes
rm -rf "$lanes" && mkdir -p "$lanes"
stage pytest-pure lane pure -q -m pure
echo "==> pytest: the database lane (two workers) beside the cluster lane; its log: $lanes/database.log"
(
  stage pytest-database database_lane
  echo "${seconds[-1]} ${failed[*]}" >"$lanes/database.stage"
) &
database=$!
stage pytest-cluster lane cluster -m "($SERIAL) and not pods"
# The portal itself as pods on the real node (the chart installed, upgraded, rolled back): the
# same cluster, after the cluster lane.
stage pytest-pods lane pods -m pods
wait "$database"
echo "==> pytest: the database lane"
cat "$lanes/database.log"
read -r took lane_failed <"$lanes/database.stage"
names+=(pytest-database)
seconds+=("$took")
[[ " $lane_failed " == *" pytest-database "* ]] && failed+=(pytest-database)
.venv/bin/python scripts/lane_minutes.py "$lanes"
summary
