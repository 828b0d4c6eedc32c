"""Single sign-on is off by default and, when configured, sends people to the provider."""

import os
import subprocess
import sys
from urllib.parse import parse_qs, urlparse

from django.urls import NoReverseMatch, reverse


def test_off_by_default(client, db):
    body = client.get(reverse("login")).content.decode()
    assert "single sign-on" not in body
    try:
        reverse("oidc_authentication_init")
        raise AssertionError("the OIDC urls should not exist when it is off")
    except NoReverseMatch:
        pass


def test_configured_sign_in_redirects_to_the_provider():
    # Settings are read at start-up, so this runs a fresh process configured for a provider.
    script = """
import django
django.setup()
from django.test import Client
from django.urls import reverse
client = Client()
assert "Sign in with single sign-on" in client.get(reverse("login")).content.decode()
response = client.get(reverse("oidc_authentication_init"))
print(response.status_code, response["Location"])
"""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "ALLOWED_HOSTS": "testserver",
        "SESSION_ENGINE": "django.contrib.sessions.backends.signed_cookies",
        "OIDC_RP_CLIENT_ID": "gpu-portal",
        "OIDC_RP_CLIENT_SECRET": "s3cret",
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://sso.example.com/authorize",
        "OIDC_OP_TOKEN_ENDPOINT": "https://sso.example.com/token",
        "OIDC_OP_USER_ENDPOINT": "https://sso.example.com/userinfo",
        "OIDC_OP_JWKS_ENDPOINT": "https://sso.example.com/jwks",
    }
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    status, location = int(out[0]), urlparse(out[1])
    assert status == 302
    assert (location.netloc, location.path) == ("sso.example.com", "/authorize")
    query = parse_qs(location.query)
    assert query["client_id"] == ["gpu-portal"] and "openid" in query["scope"][0]
