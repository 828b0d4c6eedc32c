"""Issue 51, 1: which hosts share the portal's cookies (pure), and the start-up check that
refuses a workspace domain that would."""

import pytest
from django.core.checks import Error

from portal.system_checks import workspace_origin
from workspaces.sites import shares_cookies, site, workspace_host, workspace_id_of


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("portal.example.com", "example.com"),
        ("w7.ws.example-workspaces.net", "example-workspaces.net"),
        ("portal.acme.co.uk", "acme.co.uk"),
        ("localhost", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("Portal.Example.COM.", "example.com"),
    ],
)
def test_the_site_of_a_host_is_its_registrable_domain(host, expected):
    assert site(host) == expected


@pytest.mark.parametrize(
    ("portal", "domain", "shared"),
    [
        ("portal.example.com", "", "no workspace domain"),
        ("portal.example.com", "portal.example.com", "same host"),
        ("portal.example.com", "ws.portal.example.com", "nest"),  # a child: its parent's cookies
        ("ws.example.com", "example.com", "nest"),
        ("portal.example.com", "ws.example.com", "share the site example.com"),  # a sibling
        ("portal.acme.co.uk", "ws.acme.co.uk", "share the site acme.co.uk"),
        ("portal.example.com", "ws.example-workspaces.net", None),
        ("portal.acme.co.uk", "ws.other.co.uk", None),
        ("127.0.0.1", "ws.localhost", None),
    ],
)
def test_a_workspace_domain_shares_the_portals_cookies_when_it_nests_or_shares_its_site(
    portal, domain, shared
):
    said = shares_cookies(portal, domain)
    if shared is None:
        assert said is None
    else:
        assert said is not None and shared in said


def test_a_workspace_host_names_its_workspace_and_nothing_else_does():
    domain = "ws.example-workspaces.net"
    assert workspace_host(7, domain) == "w7.ws.example-workspaces.net"
    assert workspace_id_of("w7.ws.example-workspaces.net", domain) == 7
    assert workspace_id_of("W12.WS.example-workspaces.net:8443", domain) == 12
    for host in (
        "ws.example-workspaces.net",
        "w.ws.example-workspaces.net",
        "w07.ws.example-workspaces.net",
        "x7.ws.example-workspaces.net",
        "w7.evil.net",
        "w7.ws.example-workspaces.net.evil.net",
        "a.w7.ws.example-workspaces.net",
        "",
    ):
        assert workspace_id_of(host, domain) is None, host


def _errors(settings, **over) -> list[str]:
    for name, value in over.items():
        setattr(settings, name, value)
    return [e.id for e in workspace_origin(None) if isinstance(e, Error)]


def test_the_portal_refuses_to_start_with_workspaces_on_its_own_site(settings):
    settings.PORTAL_BASE_URL = "https://portal.example.com"
    settings.WORKSPACE_ALLOW_SAME_SITE = False
    settings.PORTAL_HOST_COOKIES = False
    assert _errors(settings, WORKSPACE_DOMAIN="ws.example-workspaces.net") == []
    for shared in ("", "portal.example.com", "ws.example.com", "ws.portal.example.com"):
        assert _errors(settings, WORKSPACE_DOMAIN=shared) == ["portal.E020"], shared
    said = workspace_origin(None)[0]
    assert "WORKSPACE_DOMAIN" in said.msg and "PORTAL_HOST_COOKIES" in said.hint
    # the documented development switch
    dev = {"WORKSPACE_DOMAIN": "ws.example.com", "WORKSPACE_ALLOW_SAME_SITE": True}
    assert _errors(settings, **dev) == []


def test_host_only_portal_cookies_allow_a_sibling_domain_over_https_only(settings):
    settings.PORTAL_BASE_URL = "https://portal.example.com"
    settings.WORKSPACE_ALLOW_SAME_SITE = False
    settings.WORKSPACE_DOMAIN = "ws.example.com"
    settings.PORTAL_HOST_COOKIES = True
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    assert _errors(settings) == []
    assert _errors(settings, SESSION_COOKIE_SECURE=False) == ["portal.E021"]
    # never the portal's own origin, whatever its cookies are called
    assert _errors(settings, WORKSPACE_DOMAIN="") == ["portal.E020"]
