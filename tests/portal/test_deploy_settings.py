"""Production settings: Django's deployment check passes, plain HTTP is redirected except the
probes, and docker-compose ships no secret of its own."""

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def prod_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SECURE_", "WORKLOAD_IMAGE_", "OIDC_"))
        # set by the browser tests in this process (Playwright): never in a deployment
        and key != "DJANGO_ALLOW_ASYNC_UNSAFE"
    }
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "portal.settings.prod",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "portal.example.com,testserver",
        # workspaces on a site of their own (portal.E020)
        "PORTAL_BASE_URL": "https://portal.example.com",
        "WORKSPACE_DOMAIN": "ws.example-workspaces.net",
        **extra,
    }


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


DEPLOY_CHECK = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]


def test_the_deployment_check_passes_without_a_warning():
    done = run(DEPLOY_CHECK, prod_env(WORKLOAD_IMAGE_ALLOWLIST="registry.example.com"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_the_deployment_check_warns_that_an_empty_allow_list_runs_nothing():
    done = run(DEPLOY_CHECK, prod_env())
    assert done.returncode != 0
    assert "portal.W001" in done.stderr and "WORKLOAD_IMAGE_ALLOWLIST" in done.stderr


def test_make_test_runs_the_deploy_check_target():
    # make test runs its stages from scripts/test.sh, one `make <target>` each
    assert "bash scripts/test.sh" in (ROOT / "Makefile").read_text()
    (stages,) = [
        line
        for line in (ROOT / "scripts" / "test.sh").read_text().splitlines()
        if line.startswith("for target in ")
    ]
    assert "deploy-check" in stages.split()
    skip = ("SECRET_KEY", "MAKEFLAGS", "MFLAGS", "DJANGO_ALLOW_ASYNC_UNSAFE")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    done = run(["make", "--no-print-directory", "deploy-check"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


PROBE_SCRIPT = """
import json
import django
django.setup()
from django.conf import settings
from django.middleware.security import SecurityMiddleware
from django.test import RequestFactory

factory = RequestFactory(HTTP_HOST="portal.example.com")
security = SecurityMiddleware(lambda request: None)
def redirected(path, **headers):
    response = security.process_request(factory.get(path, **headers))
    return response["Location"] if response is not None else None

ok = security.process_response(
    factory.get("/healthz", HTTP_X_FORWARDED_PROTO="https"), django.http.HttpResponse()
)
print(json.dumps({
    "home": redirected("/"),
    "healthz": redirected("/healthz"),
    "readyz": redirected("/readyz"),
    "behind_tls_proxy": redirected("/", HTTP_X_FORWARDED_PROTO="https"),
    "hsts": ok.get("Strict-Transport-Security"),
    "allowlist": settings.WORKLOAD_IMAGE_ALLOWLIST,
}))
"""


def probe(**extra: str) -> dict:
    done = run([sys.executable, "-c", PROBE_SCRIPT], prod_env(**extra))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_production_redirects_plain_http_but_not_the_probes():
    seen = probe()
    assert seen["home"] == "https://portal.example.com/"
    # kubelet probes reach the pod over plain HTTP inside the cluster
    assert seen["healthz"] is None and seen["readyz"] is None
    # the ingress terminates TLS and says so in X-Forwarded-Proto
    assert seen["behind_tls_proxy"] is None
    assert seen["hsts"] == "max-age=31536000; includeSubDomains"


def test_hsts_and_the_redirect_come_from_the_environment():
    seen = probe(
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="600",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="false",
    )
    assert seen["home"] is None
    assert seen["hsts"] == "max-age=600"


def test_production_refuses_every_image_until_an_allow_list_is_set():
    assert probe()["allowlist"] == []
    assert probe(WORKLOAD_IMAGE_ALLOWLIST="registry.example.com,nvcr.io/nvidia")["allowlist"] == [
        "registry.example.com",
        "nvcr.io/nvidia",
    ]


def test_compose_takes_secrets_and_hosts_from_the_environment():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    environment = compose["x-portal"]["environment"]
    assert re.fullmatch(r"\$\{SECRET_KEY:\?.+\}", environment["SECRET_KEY"])
    assert re.fullmatch(r"\$\{ALLOWED_HOSTS:\?.+\}", environment["ALLOWED_HOSTS"])
    assert environment.get("SECURE_COOKIES", "true") in ("${SECURE_COOKIES:-true}", "true")
    text = (ROOT / "docker-compose.yml").read_text()
    assert "change-me" not in text and '"*"' not in text
    example = (ROOT / ".env.example").read_text()
    assert re.search(r"^SECRET_KEY=$", example, re.M)  # empty: each install makes its own
    assert re.search(r"^ALLOWED_HOSTS=", example, re.M)
    assert re.search(r"^# WORKLOAD_IMAGE_ALLOWLIST=\S", example, re.M)  # an example to copy
