"""The image's build steps (scripts/build_image.sh, what the Dockerfile runs) into a directory,
then gunicorn serving the built tree with the production settings and deploy/gunicorn.conf.py:
what a web pod runs, without a container engine. (About 15 s: npm answers from its cache.)"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import runpy
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from demo.prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # the suite's virtualenv: the image's dependencies
HOST = "portal.example.com"


def _load_copier():
    spec = importlib.util.spec_from_file_location(
        "dockerignore_copy", ROOT / "scripts" / "dockerignore_copy.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


copier = _load_copier()
RULES = copier.read_rules((ROOT / ".dockerignore").read_text())


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.production",
        ".env.example",
        ".local/kubeconfig",
        ".git/config",
        ".venv/bin/python",
        "node_modules/htmx.org/dist/htmx.min.js",
        "portal/__pycache__/views.cpython-311.pyc",
        "core/api/__pycache__",
        "tests/portal/test_metrics.py",
        "docs/screenshots/home.png",
        "deploy/helm/gpu-portal/values.yaml",
        "staticfiles/staticfiles.json",
        "gpu_portal.egg-info/PKG-INFO",
    ],
)
def test_the_dockerignore_leaves_out_secrets_local_state_and_tests(path):
    assert copier.excluded(path, RULES)


@pytest.mark.parametrize(
    "path",
    [
        "manage.py",
        "portal/views.py",
        "catalog/data/mig-parted-config.yaml",
        "templates/base.html",
        "deploy/gunicorn.conf.py",
        "package-lock.json",
        "pyproject.toml",
        "cli/main.py",
    ],
)
def test_the_dockerignore_keeps_what_the_portal_runs(path):
    assert not copier.excluded(path, RULES)


def test_dockerignore_patterns_follow_dockers_rules():
    rules = copier.read_rules("# comment\n/build\n**/*.log\ncache*/\n!cache-keep\n")
    assert copier.excluded("build/lib/x.py", rules)
    assert not copier.excluded("src/build/x.py", rules)  # anchored at the root
    assert copier.excluded("a/b/c.log", rules) and copier.excluded("c.log", rules)
    assert copier.excluded("cache-old/x", rules)
    assert not copier.excluded("cache-keep", rules)  # the last matching line wins


# --- the build ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("image") / "app"
    done = subprocess.run(
        ["bash", "scripts/build_image.sh", str(dest), "--no-pip"],
        cwd=ROOT,
        env={**os.environ, "PYTHON": str(VENV_BIN / "python")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dest


# Marked like the image's other tests, which need the database: pytest-django runs marked tests
# first, and this one apart from them would build the image a second time.
@pytest.mark.django_db(transaction=True)
def test_the_image_holds_the_app_and_its_static_files_and_nothing_else(image):
    for left_out in (".env", ".local", ".git", ".venv", "node_modules", "tests", "docs"):
        assert not (image / left_out).exists(), left_out
    assert not (image / "deploy" / "helm").exists()
    assert not list(image.rglob("__pycache__")) and not list(image.rglob("*.pyc"))
    for kept in ("manage.py", "portal/wsgi.py", "deploy/gunicorn.conf.py", "templates/base.html"):
        assert (image / kept).is_file(), kept
    manifest = json.loads((image / "staticfiles" / "staticfiles.json").read_text())["paths"]
    for asset in ("vendor/htmx/htmx.min.js", "vendor/chartjs/chart.umd.js"):
        assert (image / "staticfiles" / manifest[asset]).is_file(), asset


def prod_env(**extra: str) -> dict[str, str]:
    """What a web pod's environment holds, and nothing of this test process's."""
    db = connection.settings_dict
    # The test database (a django_db test), never the developer's.
    assert db["NAME"].startswith("test_"), db["NAME"]
    return {
        "PATH": f"{VENV_BIN}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # as the Dockerfile sets: no __pycache__ in the image
        "DJANGO_SETTINGS_MODULE": "portal.settings.prod",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": HOST,
        "WORKLOAD_IMAGE_ALLOWLIST": "registry.example.com",
        # workspaces on a site of their own, as the chart's ConfigMap says (portal.E020)
        "PORTAL_BASE_URL": f"https://{HOST}",
        "WORKSPACE_DOMAIN": "ws.example-workspaces.net",
        "DATABASE_URL": (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CACHE_URL": settings.CACHES["default"]["LOCATION"],
        "CACHE_KEY_PREFIX": settings.CACHES["default"]["KEY_PREFIX"],
        **extra,
    }


@pytest.mark.django_db(transaction=True)  # the check runs in another process
def test_the_image_passes_the_deployment_check_without_node_modules(image):
    done = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=image,
        env=prod_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


# --- gunicorn serving the image -----------------------------------------------------------------


def gunicorn_settings(monkeypatch, **environ: str) -> dict:
    """deploy/gunicorn.conf.py's values under `environ` (and none of this process's)."""
    for name in ("PROMETHEUS_MULTIPROC_DIR", "WEB_MAX_REQUESTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))


def test_workers_are_not_recycled_with_multiprocess_metrics_unless_asked(monkeypatch, tmp_path):
    """Each recycled worker's metric files stay and every scrape reads them all."""
    assert gunicorn_settings(monkeypatch)["max_requests"] == 2000
    multiproc = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    assert gunicorn_settings(monkeypatch, **multiproc)["max_requests"] == 0
    asked = gunicorn_settings(monkeypatch, WEB_MAX_REQUESTS="500", **multiproc)
    assert asked["max_requests"] == 500


@pytest.fixture(scope="module")
def web(image, django_db_setup, tmp_path_factory):
    """gunicorn -c deploy/gunicorn.conf.py in the built tree: two workers, multiprocess
    metrics; yields (base URL, access log path)."""
    run_dir = tmp_path_factory.mktemp("web")
    port = free_port()
    multiproc_dir = run_dir / "prometheus"
    env = prod_env(
        PORT=str(port),
        WEB_WORKERS="2",
        WEB_THREADS="2",
        PROMETHEUS_MULTIPROC_DIR=str(multiproc_dir),
        HOME=str(run_dir),
    )
    multiproc_dir.mkdir()
    stale = multiproc_dir / "counter_1.db"  # what an earlier run of the container left
    stale.write_bytes(b"")
    log_path = run_dir / "gunicorn.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(VENV_BIN / "gunicorn"),
                "-c",
                "deploy/gunicorn.conf.py",
                "portal.wsgi:application",
            ],
            cwd=image,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if requests.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        assert not stale.exists(), "gunicorn's on_starting empties the metrics directory"
        yield url, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.django_db(transaction=True)  # gunicorn reads the test database
def test_gunicorn_serves_the_image_with_the_production_settings(web):
    url, log_path = web
    pod_ip = {"Host": "10.1.2.3"}  # how the kubelet's probes and Prometheus arrive
    behind_ingress = {"Host": HOST, "X-Forwarded-Proto": "https"}

    assert requests.get(f"{url}/healthz", headers=pod_ip, timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{url}/accounts/login/", headers=pod_ip, timeout=5).status_code == 400
    plain = requests.get(
        f"{url}/accounts/login/", headers={"Host": HOST}, allow_redirects=False, timeout=5
    )
    assert plain.status_code == 301
    assert plain.headers["Location"] == f"https://{HOST}/accounts/login/"

    sign_ins = 4  # new connections: the two workers share them, /metrics adds both up
    for _ in range(sign_ins):
        page = requests.get(f"{url}/accounts/login/", headers=behind_ingress, timeout=5)
        assert page.status_code == 200 and 'name="password"' in page.text
    htmx = re.search(r'src="(/static/vendor/htmx/htmx\.min\.[0-9a-f]{12}\.js)"', page.text)
    assert htmx, "the sign-in page links the hashed htmx"
    static = requests.get(f"{url}{htmx.group(1)}", headers=behind_ingress, timeout=5)
    assert static.status_code == 200 and "htmx" in static.text
    assert "immutable" in static.headers["Cache-Control"]  # WhiteNoise, hashed name

    refused = requests.get(f"{url}/metrics", headers={"X-Forwarded-For": "1.2.3.4"}, timeout=5)
    assert refused.status_code == 403
    exposition = requests.get(f"{url}/metrics", headers=pod_ip, timeout=10)
    assert exposition.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition.text)
        for s in family.samples
    }
    login = (("method", "GET"), ("status", "200"), ("view", "login"))
    assert samples[("gpu_portal_http_request_duration_seconds_count", login)] == sign_ins
    assert samples[("gpu_portal_pending_approvals", ())] == 0
    assert samples[("gpu_portal_metrics_source_up", (("source", "database"),))] == 1

    access = [json.loads(line) for line in log_path.read_text().splitlines() if '"path"' in line]
    assert {"method": "GET", "path": "/healthz", "status": 200}.items() <= access[0].items()
