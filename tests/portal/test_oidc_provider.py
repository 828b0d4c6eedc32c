"""Single sign-on against a real OpenID Connect provider run locally: node-oidc-provider (npm
`oidc-provider`, OpenID Certified; tests/portal/oidc_provider.mjs), in headless Chromium. A person
signs in at the provider with a password; its userinfo carries their groups; the portal lands them
in the team and role the groups map to, makes them a platform admin, and follows the groups at the
next sign-in.

The provider is a devDependency in package.json, installed by `npm ci` (scripts/bootstrap.sh).
"""

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from core.permissions import is_platform_admin
from portal.models import OIDCIdentity
from tenants.models import AuditEvent, Membership
from tests.tenants.factories import TenantFactory

pytestmark = pytest.mark.django_db(transaction=True)

PROVIDER_SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "portal-test-secret"  # noqa: S105 - a test provider's client secret
KIM_PASSWORD = "kim-password"  # noqa: S105 - a test provider's person


def _node() -> str:
    """Node.js and the installed `oidc-provider`; either missing fails (a sign-in test that never
    ran proves nothing)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("no `node` on the PATH: install Node.js (scripts/bootstrap.sh checks for it)")
    installed = Path(django_settings.BASE_DIR) / "node_modules" / "oidc-provider" / "package.json"
    if not installed.exists():
        pytest.fail(f"no {installed.parent}: run `npm ci` (or scripts/bootstrap.sh) to install it")
    return node


class OIDCProvider:
    """node-oidc-provider with one person, `kim`, whose groups a test sets (read at each
    request)."""

    def __init__(self, tmp_path: Path, redirect_uri: str):
        self.tmp_path = tmp_path
        self.redirect_uri = redirect_uri
        self.accounts = tmp_path / "accounts.json"
        self.log = tmp_path / "oidc-provider.log"
        self.issuer = ""
        self.process: subprocess.Popen | None = None

    def set_groups(self, groups: list[str]) -> None:
        kim = {
            "sub": "kim-0001",
            "login": "kim@example.com",
            "password": KIM_PASSWORD,
            "claims": {
                "email": "kim@example.com",
                "email_verified": True,
                "preferred_username": "kim",
                "name": "Kim Provider",
                "groups": groups,
            },
        }
        self.accounts.write_text(json.dumps([kim]))

    def start(self) -> dict:
        """Start the provider; return its discovery document."""
        node = _node()
        ready = self.tmp_path / "oidc-provider.ready"
        env = {
            **os.environ,
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_REDIRECT_URI": self.redirect_uri,
            "OIDC_ACCOUNTS_FILE": str(self.accounts),
            "OIDC_READY_FILE": str(ready),
        }
        with self.log.open("ab") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(  # noqa: S603 - our own test script
                [node, str(PROVIDER_SCRIPT)], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(
                    f"oidc-provider did not start:\n{self.log.read_text()[-2000:]}"
                )
            time.sleep(0.1)
        self.issuer = ready.read_text()
        url = f"{self.issuer}/.well-known/openid-configuration"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a local http URL
            return json.load(response)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def provider(tmp_path, live_server, settings):
    provider = OIDCProvider(tmp_path, f"{live_server.url}/oidc/callback/")
    provider.set_groups([])
    discovery = provider.start()
    settings.ROOT_URLCONF = "tests.portal.oidc_urls"
    settings.OIDC_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "portal.oidc.PortalOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = discovery["authorization_endpoint"]
    settings.OIDC_OP_TOKEN_ENDPOINT = discovery["token_endpoint"]
    settings.OIDC_OP_USER_ENDPOINT = discovery["userinfo_endpoint"]
    settings.OIDC_OP_JWKS_ENDPOINT = discovery["jwks_uri"]
    settings.OIDC_OP_ISSUER = discovery["issuer"]
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_USERNAME_CLAIM = "preferred_username"
    settings.LOGIN_REDIRECT_URL_FAILURE = "login"
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_GROUP_MAP = {"vision-leads": "team-b:owner"}
    settings.OIDC_GROUP_TENANT_PATTERN = r"gpu-(?P<tenant>[a-z0-9-]+)-(?P<role>owner|member|viewer)"
    settings.OIDC_PLATFORM_ADMIN_GROUPS = ["gpu-platform"]
    yield provider
    provider.stop()


def _sign_in(browser, live_server) -> str:
    """Sign in on the provider's login page; return the portal page it lands on."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{live_server.url}/oidc/authenticate/")
    page.wait_for_selector("input[name=login]", timeout=20_000)  # the provider's password form
    assert page.url.startswith("http://127.0.0.1:")
    page.fill("input[name=login]", "kim@example.com")
    page.fill("input[name=password]", KIM_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/**", timeout=20_000)
    landed = page.url
    team = page.goto(f"{live_server.url}/teams/team-a/")
    body = page.content()
    context.close()
    return f"{landed}\n{team.status if team else ''}\n{body}"


def test_groups_from_the_provider_put_a_person_in_their_team_and_follow_them(
    provider, live_server, browser
):
    TenantFactory(slug="team-a", name="Team A")
    team_b = TenantFactory(slug="team-b", name="Team B")
    provider.set_groups(["gpu-team-a-member", "gpu-platform", "coffee-club"])

    seen = _sign_in(browser, live_server)

    identity = OIDCIdentity.objects.select_related("user").get(issuer=provider.issuer)
    kim = identity.user
    assert kim.username == "kim" and identity.subject  # bound to the provider's subject
    assert "you are member" in seen, seen[-3000:]
    held = {m.tenant.slug: (m.role, m.source) for m in kim.memberships.select_related("tenant")}
    assert held == {"team-a": ("member", "provider")}
    assert is_platform_admin(kim)
    applied = AuditEvent.objects.get(verb="sso.groups_applied")
    assert applied.after["unmatched_groups"] == ["coffee-club"]

    # A local membership given in the portal is the portal's.
    Membership.objects.create(tenant=team_b, user=kim, role="viewer")
    # At the provider: promoted in team-a, out of the platform team. The next sign-in follows.
    provider.set_groups(["gpu-team-a-owner", "vision-leads"])
    seen = _sign_in(browser, live_server)

    kim.refresh_from_db()
    held = {m.tenant.slug: (m.role, m.source) for m in kim.memberships.select_related("tenant")}
    assert held == {"team-a": ("owner", "provider"), "team-b": ("viewer", "local")}
    assert "you are owner" in seen
    assert not is_platform_admin(kim)
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"membership.added", "membership.changed", "sso.platform_admin_revoked"} <= verbs

    # Out of every group: the provider's membership goes, the local one stays.
    provider.set_groups([])
    _sign_in(browser, live_server)
    held = {m.tenant.slug: m.source for m in kim.memberships.select_related("tenant")}
    assert held == {"team-b": "local"}


def test_a_wrong_password_at_the_provider_makes_no_account(provider, live_server, browser):
    provider.set_groups(["gpu-team-a-member"])
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{live_server.url}/oidc/authenticate/")
    page.wait_for_selector("input[name=login]", timeout=20_000)
    page.fill("input[name=login]", "kim@example.com")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    # The provider asks again, saying why.
    page.wait_for_selector("[role=alert] >> text=Invalid login name or password", timeout=20_000)
    assert page.is_visible("input[name=password]")
    assert page.url.startswith(provider.issuer)  # never sent back to the portal
    context.close()
    assert not OIDCIdentity.objects.exists()
