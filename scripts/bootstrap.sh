#!/usr/bin/env bash
# Installs and starts what the portal needs on a Debian 12 machine; idempotent and quiet when
# everything is already there. Used by `make run` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

DB_NAME=${DB_NAME:-gpu_portal}
DB_USER=${DB_USER:-gpu_portal}
DB_PASSWORD=${DB_PASSWORD:-gpu_portal}

# 1. Debian packages: PostgreSQL, Redis (and openssl for the local cluster's keys).
missing=()
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)  # metering tests: a real Prometheus
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # browser tests
command -v wrk >/dev/null 2>&1 || missing+=(wrk)  # make bench: the API load generator
# The local cluster's real node (localcluster/realnode.py): the CNI plugins, iptables for
# kube-proxy and NetworkPolicy, buildah and debootstrap for the images built here, gcc for the
# pause process and with libseccomp for runc (built from its Go module).
if [ "${LOCALCLUSTER_REAL_NODE:-1}" != 0 ]; then
  [ -f /usr/include/seccomp.h ] || missing+=(libseccomp-dev pkg-config)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null 2>&1 || missing+=(iptables)
  command -v buildah >/dev/null 2>&1 || missing+=(buildah)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "Installing Debian packages: ${missing[*]} (first run only)"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# 2. Python virtualenv with the pinned dependencies; reinstalled only when pyproject.toml changes.
if [ ! -x .venv/bin/python ]; then
  say "Creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  say "Installing Python dependencies into .venv (first run takes a minute)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# 2b. Front-end files (htmx, Chart.js) from the npm registry, served by the portal itself.
npm_stamp=node_modules/.installed-$(sha256sum package-lock.json | cut -c1-16)
if [ ! -f "$npm_stamp" ]; then
  say "Installing front-end packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
  touch "$npm_stamp"
fi

# 3. PostgreSQL on 127.0.0.1:5432 (Debian's cluster), with the portal's role and database.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  say "Starting PostgreSQL"
  # The cluster on port 5432, not the first one listed: the fault run keeps a cluster of its own
  # (gpu-portal-faults, port 55432) that sorts before "main".
  cluster=$(pg_lsclusters -h | awk '$3 == 5432 {print $1, $2; exit}')
  if [ -z "$cluster" ]; then
    ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
    $SUDO pg_createcluster --port 5432 "$ver" main >/dev/null
    cluster="$ver main"
  fi
  # shellcheck disable=SC2086  # "version name", split on purpose
  $SUDO pg_ctlcluster $cluster start
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
fi
psql_admin() { $SUDO -u postgres psql -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(id -u)" -eq 0 ]; then psql_admin() { su postgres -c "psql -v ON_ERROR_STOP=1 -qtA $(printf '%q ' "$@")"; }; fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname='$DB_USER'")" != "1" ]; then
  say "Creating PostgreSQL role $DB_USER"
  # CREATEDB: the test runner creates and drops its own test database.
  psql_admin -c "CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASSWORD'"
fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname='$DB_NAME'")" != "1" ]; then
  psql_admin -c "CREATE DATABASE $DB_NAME OWNER $DB_USER"
fi

# 4. Redis on 127.0.0.1:6379 (Celery's broker).
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "Starting Redis"
  mkdir -p .local
  redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly no \
    --logfile "$PWD/.local/redis.log"
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
