"""How the one door to the API server names what went wrong (pure): what is tried again and
what is recorded for good."""

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from core.errors import PermanentClusterError, TransientClusterError
from scheduler.cluster import kube


def forbidden() -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = '{"message": "namespaces \\"t\\" is forbidden"}'
    return exc


def test_a_403_is_for_good_unless_the_api_server_was_just_unreachable():
    assert isinstance(kube._translate(forbidden(), "get Namespace"), kube.ClusterForbidden)
    warming = kube._translate(forbidden(), "get Namespace", since_unreachable=1.0)
    assert isinstance(warming, TransientClusterError) and "tried again" in str(warming)
    late = kube._translate(forbidden(), "get Namespace", since_unreachable=kube.WARMING_UP_S + 1)
    assert isinstance(late, kube.ClusterForbidden)


def test_the_outage_a_gateway_saw_is_its_own():
    """The worker's gateway that met the outage retries the 403s that follow it; another
    gateway (a member's, a fresh one) that never met it keeps the 403 as the account's limit."""
    worker = kube.KubeGateway(client.ApiClient())
    down = worker._error(urllib3.exceptions.NewConnectionError(None, "refused"), "get Namespace")
    assert isinstance(down, TransientClusterError) and "cannot reach" in str(down)
    assert isinstance(worker._error(forbidden(), "get Namespace"), TransientClusterError)
    member = kube.KubeGateway(client.ApiClient())
    assert isinstance(member._error(forbidden(), "get Namespace"), kube.ClusterForbidden)


def test_other_refusals_are_for_good_and_busy_answers_are_tried_again():
    invalid = ApiException(status=422, reason="Invalid")
    assert type(kube._translate(invalid, "apply Job", since_unreachable=1.0)) is (
        PermanentClusterError
    )
    assert isinstance(kube._translate(ApiException(status=429), "list Pod"), TransientClusterError)
