# The two commands of the README: `make run` and `make test`. Everything else is a helper.
SHELL := /bin/bash
PY := .venv/bin/python
export DJANGO_SETTINGS_MODULE ?= portal.settings.dev

.PHONY: run test test-fast setup cluster cluster-down cluster-reset cluster-worker cluster-worker-down lint layers typecheck migrations-check pytest bench faults screenshots replay

setup:
	@bash scripts/bootstrap.sh

cluster: setup
	@$(PY) -m localcluster up

cluster-down:
	@$(PY) -m localcluster down

cluster-reset:
	@$(PY) -m localcluster reset

# a second cluster, a MultiKueue worker of the first (localcluster/worker.py)
cluster-worker: setup
	@$(PY) -m localcluster worker up

cluster-worker-down:
	@$(PY) -m localcluster worker down

run: cluster
	@echo "==> nodes (the demo's B200 work runs on the real one)"
	@$(PY) -m localcluster real-node --gpus B200-180GB:2
	@echo "==> a simulated A100-40GB served through DRA (MIG cut on demand, docs/dra.md)"
	@$(PY) -m localcluster dra-node --gpus A100-40GB:1
	@$(PY) manage.py migrate --noinput -v0
	@$(PY) manage.py seed_demo
	@bash scripts/serve.sh

lint:
	@echo "==> ruff"
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check --quiet . || (echo "ruff format: run '.venv/bin/ruff format .'" && exit 1)

layers:
	@echo "==> import-linter (the layers of docs/architecture.md)"
	@.venv/bin/lint-imports --no-cache

typecheck:
	@echo "==> mypy"
	@.venv/bin/mypy core catalog portal tenants scheduler metering workspaces replay localcluster faults bench cli demo

migrations-check:
	@echo "==> makemigrations --check"
	@$(PY) manage.py makemigrations --check --dry-run -v1

# Django's deployment check of the production settings, with a throwaway secret made here.
.PHONY: deploy-check
deploy-check:
	@echo "==> manage.py check --deploy (production settings)"
	@DJANGO_SETTINGS_MODULE=portal.settings.prod \
	  SECRET_KEY="$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(50))')" \
	  ALLOWED_HOSTS=portal.example.com WORKLOAD_IMAGE_ALLOWLIST=registry.example.com \
	  PORTAL_BASE_URL=https://portal.example.com WORKSPACE_DOMAIN=ws.example-workspaces.net \
	  $(PY) manage.py check --deploy --fail-level WARNING

# The Helm chart (deploy/helm/): helm lint --strict and helm template with each values set.
.PHONY: chart
chart:
	@echo "==> helm lint, helm template (deploy/helm/gpu-portal)"
	@PY=$(PY) bash deploy/helm/check.sh

# Every test in one process, the 30 slowest printed at the end (make test runs the same tests
# in lanes, the database lane in parallel: scripts/test.sh).
pytest:
	@echo "==> pytest"
	@$(PY) -m pytest --ds=portal.settings.test --durations=30; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; \
	  exit $$rc

# Every stage timed, the total against the standing limit (scripts/test.sh).
test:
	@bash scripts/test.sh

# The pure tests (no database, no Redis, no cluster: conftest.py marks them `pure`), lint and
# layers, in under a minute. The database and Redis point nowhere, so a test that needs them
# fails here instead of passing as pure. test_schema_fuzz loads the schema (throttles: Redis)
# when it is collected; none of its tests is pure.
test-fast: lint layers
	@echo "==> pytest -m pure"
	@DATABASE_URL=postgres://nobody:nothing@127.0.0.1:1/nowhere \
	  TEST_CACHE_URL=redis://127.0.0.1:1/0 TEST_CELERY_BROKER_URL=redis://127.0.0.1:1/0 \
	  $(PY) -m pytest --ds=portal.settings.test -q -m pure \
	  --ignore=tests/portal/api/test_schema_fuzz.py

bench: cluster
	@DJANGO_SETTINGS_MODULE=portal.settings.test $(PY) -m bench

# Replay the Alibaba 2023 GPU trace through the portal's policies (docs/replay.md); options after
# ARGS, e.g. make replay ARGS="--part simulate". The trace is read where it lies. Only part 1
# (overtime, or all) needs the local cluster, and it brings the cluster up itself: the pure parts
# (simulate, calibrate, packing) start in seconds on a fresh machine.
replay: setup
	@DJANGO_SETTINGS_MODULE=portal.settings.test $(PY) -m replay $(ARGS)

# Every fault of the fault-injection run (tests/faults/ runs the short list in `make test`).
faults: cluster
	@$(PY) -m faults

# Refresh the README's screenshots from the browser tests.
screenshots: cluster
	@SAVE_SCREENSHOTS=1 $(PY) -m pytest --ds=portal.settings.test tests/portal/test_browser.py tests/metering/test_browser.py -q
