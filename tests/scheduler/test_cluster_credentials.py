"""A worker's kubeconfig is checked as MultiKueue checks it, and what it refuses is said with
what to change (pure)."""

import pytest

from scheduler.cluster import credentials
from scheduler.cluster.credentials import BadKubeconfig, check_kubeconfig, kubeconfig_of_secret
from tests.scheduler.fleet_standins import kubeconfig, secret, text


def test_a_self_contained_kubeconfig_passes_and_shows_no_secret():
    checked = check_kubeconfig(text())
    assert checked == credentials.Kubeconfig(
        server="https://10.0.0.7:6443", context="east", user="multikueue"
    )
    assert "secret-token-value" not in repr(checked)


def test_a_client_certificate_instead_of_a_token_passes():
    config = kubeconfig(
        users={"token": None, "client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"}
    )
    assert check_kubeconfig(text(config)).user == "multikueue"


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"users": {"tokenFile": "/var/run/token"}}, "sets tokenFile: put the token itself"),
        ({"users": {"exec": {"command": "aws"}}}, "exec plugins are refused by MultiKueue"),
        ({"users": {"auth-provider": {"name": "gcp"}}}, "auth providers are refused"),
        ({"users": {"username": "a", "password": "b"}}, "basic auth is refused"),
        ({"users": {"client-certificate": "/etc/cert.pem"}}, "embed it as client-certificate-data"),
        ({"users": {"client-key": "/etc/key.pem"}}, "embed it as client-key-data"),
        ({"users": {"token": None}}, "has no token and no client certificate"),
        ({"users": {"client-key-data": "not base64!"}}, "client-key-data is not base64"),
        (
            {"clusters": {"insecure-skip-tls-verify": True}},
            "sets insecure-skip-tls-verify: remove it: MultiKueue requires TLS verification",
        ),
        (
            {"clusters": {"certificate-authority": "/etc/ca.crt"}},
            "embed the CA as certificate-authority-data",
        ),
        ({"clusters": {"certificate-authority-data": "/etc/ca.crt"}}, "CA data is not base64"),
        ({"clusters": {"server": None}}, "has no server URL"),
        ({"clusters": {"server": "10.0.0.7:6443"}}, "is not a URL; write https://host:port"),
        ({"clusters": {"server": "https://under_score.example:6443"}}, "refuses the server host"),
    ],
)
def test_what_multikueue_refuses_is_refused_with_what_to_change(changes, said):
    with pytest.raises(BadKubeconfig, match=said.replace("(", r"\(")):
        check_kubeconfig(text(kubeconfig(**changes)))


def test_every_entry_is_checked_not_only_the_current_one():
    config = kubeconfig()
    config["users"].append({"name": "old", "user": {"tokenFile": "/t"}})
    with pytest.raises(BadKubeconfig, match="user 'old' sets tokenFile"):
        check_kubeconfig(text(config))


@pytest.mark.parametrize(
    ("config_text", "said"),
    [
        ("clusters: [", "is not YAML"),
        ("just text", "has no clusters"),
        (text({**kubeconfig(), "current-context": ""}), "has no current-context"),
        (text({**kubeconfig(), "current-context": "west"}), "names context 'west'"),
        ("x" * (credentials.MAX_BYTES + 1), "is over 256 KiB"),
    ],
)
def test_what_is_not_a_usable_kubeconfig_is_said(config_text, said):
    with pytest.raises(BadKubeconfig, match=said):
        check_kubeconfig(config_text)


def test_the_kubeconfig_is_read_from_the_secrets_kubeconfig_key():
    assert kubeconfig_of_secret(secret(text()), "kueue-system/east") == text()
    with pytest.raises(BadKubeconfig, match="there is no Secret kueue-system/east"):
        kubeconfig_of_secret(None, "kueue-system/east")
    with pytest.raises(BadKubeconfig, match="has no key 'kubeconfig'"):
        kubeconfig_of_secret({"data": {"config": "eA=="}}, "kueue-system/east")
    with pytest.raises(BadKubeconfig, match="is not base64 text"):
        kubeconfig_of_secret({"data": {"kubeconfig": "%%%"}}, "kueue-system/east")
