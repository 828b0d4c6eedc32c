#!/usr/bin/env bash
# Serves the portal on http://127.0.0.1:8000 with a Celery worker and beat; Ctrl-C stops all.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .local
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

# GPU metrics as a real cluster has them (DCGM, Prometheus, the custom metrics API), so that
# utilisation is known and autoscaled services scale: demo/metrics.py. It writes
# PROMETHEUS_URL for the portal's processes once Prometheus answers.
rm -f .local/demo-metrics.env
.venv/bin/python -m demo >>.local/metrics.log 2>&1 &
pids+=($!)
for _ in $(seq 60); do [ -f .local/demo-metrics.env ] && break; sleep 0.5; done
if [ -f .local/demo-metrics.env ]; then
  set -a && . .local/demo-metrics.env && set +a
else
  echo "GPU metrics not started (see .local/metrics.log): utilisation unknown, no autoscaling" >&2
fi

# A prefork worker's tasks run in its children and its main process serves their metrics
# (WORKER_METRICS_PORT): prometheus-client's multiprocess mode, a directory of the worker's own.
worker_metrics="$PWD/.local/prometheus/worker"
rm -rf "$worker_metrics" && mkdir -p "$worker_metrics"
PROMETHEUS_MULTIPROC_DIR="$worker_metrics" \
  .venv/bin/celery -A portal worker -Q default,reconcile,metering,notify --concurrency 2 \
  --loglevel INFO >>.local/worker.log 2>&1 &
pids+=($!)
# The workload sync in a process of its own: each run takes on what the last one read.
.venv/bin/celery -A portal worker -Q follow --concurrency 1 -n follow@%h --without-mingle \
  --loglevel INFO >>.local/worker.log 2>&1 &
pids+=($!)
.venv/bin/celery -A portal beat --loglevel INFO \
  --schedule .local/celerybeat-schedule >>.local/beat.log 2>&1 &
pids+=($!)

cat <<MSG

  GPU Portal:        http://127.0.0.1:8000/
  Platform console:  http://127.0.0.1:8000/console/ (Django admin: /admin/)
  API docs:          http://127.0.0.1:8000/api/docs/
  Sign in as admin (platform admin), alice (team-a owner), bob (team-a member),
  carol (team-b owner); the password of each is: gpu-portal-demo
  Worker and beat log to .local/worker.log and .local/beat.log, each request to .local/web.log,
  GPU metrics (Prometheus ${PROMETHEUS_URL:-not started}) to .local/metrics.log.
  Ctrl-C stops everything.

MSG
# gunicorn as the Helm chart runs it (scripts/serve_web.sh), not runserver: no connection per request.
bash scripts/serve_web.sh
