#!/usr/bin/env bash
# The image's build steps, as one script: the Dockerfile runs it, and so does
# tests/deploy/test_image.py (no container engine needed). Run from a source checkout:
#
#   scripts/build_image.sh DEST [--no-pip]
#
# 1. copies the checkout into DEST (empty or new), leaving out what .dockerignore excludes;
# 2. installs the Python packages (pyproject.toml) into $PYTHON's environment, unless --no-pip
#    (the Dockerfile installs them in a layer of their own; the test uses the existing .venv);
# 3. installs the front-end packages (htmx, Chart.js) from package-lock.json into DEST;
# 4. collects the static files with the production settings into DEST/staticfiles;
# 5. removes DEST/node_modules: the collected copies are what the portal serves.
#
# PYTHON picks the interpreter (default: python3); it needs the portal's dependencies.
set -euo pipefail

usage() { echo "usage: PYTHON=python3 $0 DEST [--no-pip]" >&2; exit 2; }
dest="" pip=1
for arg in "$@"; do
  case "$arg" in
    --no-pip) pip=0 ;;
    -h|--help) usage ;;
    -*) echo "unknown option: $arg" >&2; usage ;;
    *) [ -z "$dest" ] || usage; dest=$arg ;;
  esac
done
[ -n "$dest" ] || usage
PYTHON=${PYTHON:-python3}
src=$(pwd)
# A relative path (.venv/bin/python) is the checkout's: the steps below run in DEST. Not
# resolved further: a virtualenv's python is a symlink that must stay one.
case "$PYTHON" in /*) ;; */*) PYTHON="$src/$PYTHON" ;; esac
[ -f "$src/manage.py" ] && [ -f "$src/package-lock.json" ] \
  || { echo "run from the portal's source checkout" >&2; exit 2; }
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
[ "$dest" != "$src" ] && [ -z "$(ls -A "$dest")" ] \
  || { echo "DEST must be a new or empty directory other than the checkout" >&2; exit 2; }

echo "==> copying the build context into $dest"
"$PYTHON" "$src/scripts/dockerignore_copy.py" "$src" "$dest"

if [ "$pip" -eq 1 ]; then
  echo "==> installing the Python packages"
  # From the checkout: pip builds in the source tree, and DEST stays free of build leftovers.
  "$PYTHON" -m pip install --no-cache-dir "$src"
fi

echo "==> installing the front-end packages (npm ci)"
# --prefer-offline: the npm cache answers when it can (a rebuild costs no download).
(cd "$dest" && npm ci --omit=dev --prefer-offline --no-audit --no-fund --loglevel=error)

echo "==> collecting static files (production settings)"
# A throwaway key only for this command: prod.py refuses to start without one. No database,
# cache or broker is reached. Nothing of the caller's .env is read (it is not in DEST).
(
  cd "$dest"
  DJANGO_SETTINGS_MODULE=portal.settings.prod \
  SECRET_KEY="build-only-$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(32))')" \
  ALLOWED_HOSTS=build.invalid \
    "$PYTHON" manage.py collectstatic --noinput --verbosity 0
)
for asset in vendor/htmx/htmx.min.js vendor/chartjs/chart.umd.js; do
  [ -f "$dest/staticfiles/$asset" ] \
    || { echo "collectstatic did not collect $asset (npm ci?)" >&2; exit 1; }
done
rm -rf "$dest/node_modules"
echo "==> built into $dest"
