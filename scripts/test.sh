#!/usr/bin/env bash
# `make test`: every check and every test, stage by stage, each timed. The summary prints each
# stage's time and the total, and fails loudly when the total passes the standing limit (45
# minutes for a fresh machine, Debian packages, venv and Go builds included; TEST_LIMIT_S moves
# it). pytest prints its 30 slowest tests itself (--durations in the Makefile's pytest target).
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
for target in lint layers typecheck migrations-check deploy-check chart pytest; do
  stage "$target" m "$target"
done
summary
