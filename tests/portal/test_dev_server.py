"""`make run` serves the portal as the Helm chart does (gunicorn, gthread, threads reused): a
burst of requests holds at most workers × threads database connections, where runserver opened
one per request and kept each for DB_CONN_MAX_AGE (issue 49, 1). Its settings show no debug page."""

import http.client
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(settings.BASE_DIR)
WORKERS, THREADS = 2, 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_url() -> str:
    d = connection.settings_dict
    host, port = d["HOST"] or "127.0.0.1", d["PORT"] or 5432
    return f"postgres://{d['USER']}:{d['PASSWORD']}@{host}:{port}/{d['NAME']}"


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - local
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _connections() -> int:
    """The test database's connections but this one's, read afresh (outside the test's own
    transaction, in which PostgreSQL would keep showing its first snapshot of the activity)."""
    with psycopg.connect(_database_url(), autocommit=True) as own:
        row = own.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [connection.settings_dict["NAME"]],
        ).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture
def dev_server(db, tmp_path):
    """scripts/serve_web.sh (what `make run` serves the portal with) on a free port, on the dev
    settings and the test database, small: 2 workers of 2 threads."""
    port = _free_port()
    env = {
        # DEBUG unset: the dev settings' own default, as `make run` has it
        **{k: v for k, v in os.environ.items() if k not in ("DJANGO_ALLOW_ASYNC_UNSAFE", "DEBUG")},
        "DJANGO_SETTINGS_MODULE": "portal.settings.dev",
        "DATABASE_URL": _database_url(),
        "CACHE_URL": settings.CACHES["default"]["LOCATION"],
        "CACHE_KEY_PREFIX": settings.CACHES["default"]["KEY_PREFIX"],
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "WEB_BIND": f"127.0.0.1:{port}",
        "WEB_WORKERS": str(WORKERS),
        "WEB_THREADS": str(THREADS),
        "WEB_ACCESS_LOG": str(tmp_path / "access.log"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        ["bash", "scripts/serve_web.sh"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while _get_or_none(f"{base}/healthz") != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail((tmp_path / "server.log").read_text()[-3000:])
        time.sleep(0.3)
    yield base
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()


def _get_or_none(url: str) -> int | None:
    try:
        return _get(url)
    except OSError:
        return None


def test_make_run_serves_with_gunicorn_as_the_chart_does():
    serve = (ROOT / "scripts/serve.sh").read_text()
    assert "runserver" not in serve.replace("not runserver", "")
    assert "bash scripts/serve_web.sh" in serve
    web = (ROOT / "scripts/serve_web.sh").read_text()
    assert "gunicorn -c deploy/gunicorn.conf.py" in web


def test_open_browser_connections_hold_at_most_a_database_connection_per_thread(dev_server):
    """20 clients keep their HTTP connection open after a request that read its session from
    PostgreSQL (as browsers and htmx's polling do): runserver held a thread, and so a database
    connection, for each of them; gunicorn's threads are reused, so no more than it has."""
    before = _connections()
    host, port = dev_server.removeprefix("http://").split(":")
    cookie = f"{settings.SESSION_COOKIE_NAME}=no-such-session-{time.time_ns()}"
    clients = [http.client.HTTPConnection(host, int(port), timeout=30) for _ in range(20)]
    try:
        for client in clients:
            client.request("GET", "/no-such-page/", headers={"Cookie": cookie})
            response = client.getresponse()
            response.read()
            assert response.status == 404 and not response.will_close
        assert _connections() - before <= WORKERS * THREADS
    finally:
        for client in clients:
            client.close()


def test_the_dev_settings_show_the_portals_pages_not_the_debug_page(dev_server):
    """A mistyped address is the portal's own 404 (not Django's debug page with the URL map),
    and its stylesheet is served (WhiteNoise from the sources, no collectstatic)."""
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"{dev_server}/no-such-page/", timeout=30)  # noqa: S310 - local
    page = raised.value.read().decode()
    assert raised.value.code == 404
    assert "Page not found" in page and "GPU Portal" in page
    assert "URLconf" not in page and "DEBUG = True" not in page
    assert _get(f"{dev_server}/static/portal/portal.css") == 200
