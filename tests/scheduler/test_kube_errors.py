"""How the one door to the API server names what went wrong (pure): what is tried again and
what is recorded for good."""

import urllib3
from kubernetes.client.rest import ApiException

from core.errors import PermanentClusterError, TransientClusterError
from scheduler.cluster import kube


def forbidden() -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = '{"message": "namespaces \\"t\\" is forbidden"}'
    return exc


def test_a_403_is_for_good_unless_the_api_server_was_just_unreachable(monkeypatch):
    monkeypatch.setattr(kube, "_unreachable_at", None)
    assert isinstance(kube._translate(forbidden(), "get Namespace"), kube.ClusterForbidden)

    # an outage, then the API server answers 403 while it loads its RBAC: tried again
    down = kube._translate(urllib3.exceptions.NewConnectionError(None, "refused"), "get Namespace")
    assert isinstance(down, TransientClusterError) and "cannot reach" in str(down)
    warming = kube._translate(forbidden(), "get Namespace")
    assert isinstance(warming, TransientClusterError) and "tried again" in str(warming)

    # long after the outage a 403 is the account's real limit again
    monkeypatch.setattr(kube, "_unreachable_at", kube.time.monotonic() - kube.WARMING_UP_S - 1)
    assert isinstance(kube._translate(forbidden(), "get Namespace"), kube.ClusterForbidden)


def test_other_refusals_are_for_good_and_busy_answers_are_tried_again(monkeypatch):
    monkeypatch.setattr(kube, "_unreachable_at", kube.time.monotonic())
    invalid = ApiException(status=422, reason="Invalid")
    assert type(kube._translate(invalid, "apply Job")) is PermanentClusterError
    assert isinstance(kube._translate(ApiException(status=429), "list Pod"), TransientClusterError)
