#!/usr/bin/env bash
# The portal's web server for `make run` (scripts/serve.sh), run as the Helm chart's web
# container runs it: gunicorn with deploy/gunicorn.conf.py, gthread workers whose threads are
# reused, so the database connections are at most workers × threads, each kept for
# DB_CONN_MAX_AGE and reused (Django's runserver started a thread, and so a connection, per
# request: 1,416 form posts in two minutes used up PostgreSQL's 100). The chart's sizes by
# default (web.workers, web.threads); code changes reload the workers. WEB_BIND says where.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .local
web_metrics="$PWD/.local/prometheus/web"  # one directory per gunicorn (docs/configuration.md)
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$web_metrics}"
export WEB_WORKERS="${WEB_WORKERS:-2}" WEB_THREADS="${WEB_THREADS:-4}"
export WEB_PRELOAD=0  # --reload imports the code in each worker, not once in the master
exec .venv/bin/gunicorn -c deploy/gunicorn.conf.py --bind "${WEB_BIND:-127.0.0.1:8000}" \
  --reload --access-logfile "${WEB_ACCESS_LOG:-.local/web.log}" portal.wsgi:application
