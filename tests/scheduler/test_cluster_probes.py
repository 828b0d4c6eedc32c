"""A registered cluster's health: what the door answered, judged into one sentence for the
cluster's page and /readyz (pure), and the answers read through a real gateway from an API
server stand-in on loopback (no cluster)."""

import pytest

from scheduler.cluster import probes
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.probes import Answers, judge
from tests.scheduler.fleet_standins import (
    CLUSTERQUEUE_CRD,
    MULTIKUEUE_018,
    MULTIKUEUE_019,
    StandInApiServer,
    kubeconfig,
    text,
)

HEALTHY = Answers(
    server="https://10.0.0.7:6443",
    version="v1.36.3",
    clusterqueue_crd=CLUSTERQUEUE_CRD,
    multikueue_crd=MULTIKUEUE_019,
)


def test_a_cluster_with_kueue_0_19_can_serve():
    health = judge("east", HEALTHY)
    assert health == probes.ClusterHealth(True, "0.19 or newer") and health.ok


@pytest.mark.parametrize(
    ("answers", "reachable", "said"),
    [
        (
            Answers(credentials="cluster east: there is no Secret kueue-system/east"),
            None,
            "there is no Secret kueue-system/east",
        ),
        (
            Answers(server="https://10.0.0.7:6443", failure="get Version /version: cannot reach"),
            False,
            "cluster east (https://10.0.0.7:6443) does not answer: check the server address",
        ),
        (
            Answers(failure="get Version /version: 401 Unauthorized", status=401),
            True,
            "refuses the credentials in its kubeconfig (401 Unauthorized): the token or client "
            "certificate is wrong or expired",
        ),
        (
            Answers(failure="get CustomResourceDefinition ...: 403 forbidden", status=403),
            True,
            "takes the credentials but refuses what the portal asks (403 Forbidden)",
        ),
        (
            Answers(failure="get Version /version: 503 Service Unavailable", status=503),
            True,
            "answers with an error: get Version /version: 503",
        ),
        (
            Answers(version="v1.36.3", clusterqueue_crd=None),
            True,
            "Kueue is not installed on cluster east: install Kueue v0.19.2",
        ),
        (
            Answers(version="v1.34.2", clusterqueue_crd=CLUSTERQUEUE_CRD),
            True,
            "cluster east: Kubernetes v1.34.2 is older than 1.35",
        ),
        (
            Answers(version="v1.36.3", clusterqueue_crd=CLUSTERQUEUE_CRD, multikueue_crd=None),
            True,
            "has no MultiKueue CRDs (multikueueconfigs.kueue.x-k8s.io)",
        ),
        (
            Answers(
                version="v1.36.3", clusterqueue_crd=CLUSTERQUEUE_CRD, multikueue_crd=MULTIKUEUE_018
            ),
            True,
            "Kueue on cluster east is older than 0.19, which MultiKueue's dispatch in the "
            "platform's order needs: upgrade Kueue to v0.19.2",
        ),
    ],
)
def test_each_way_a_cluster_cannot_serve_is_said_with_what_to_change(answers, reachable, said):
    health = judge("east", answers)
    assert not health.ok
    assert health.reachable is reachable
    assert said in health.problem


def test_a_standalone_cluster_is_held_to_the_portals_own_floor_only():
    answers = Answers(
        version="v1.36.3", clusterqueue_crd=CLUSTERQUEUE_CRD, multikueue_crd=MULTIKUEUE_018
    )
    assert judge("local", answers, multikueue=False) == probes.ClusterHealth(True, "0.18 or newer")
    assert not judge("local", answers).ok


@pytest.fixture
def stand_in():
    server = StandInApiServer(crds=(CLUSTERQUEUE_CRD, MULTIKUEUE_019))
    yield server
    server.close()


def _gateway(server: StandInApiServer) -> KubeGateway:
    return KubeGateway.from_kubeconfig_text(text(kubeconfig(server=server.url)))


def test_the_answers_come_through_a_gateway_built_from_the_kubeconfig_text(stand_in):
    answers = probes.ask(_gateway(stand_in), server=stand_in.url)
    assert judge("east", answers).ok
    assert stand_in.paths == [
        "/version",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterqueues.kueue.x-k8s.io",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/multikueueconfigs.kueue.x-k8s.io",
    ]


@pytest.mark.parametrize(("status", "said"), [(401, "401 Unauthorized"), (403, "403 Forbidden")])
def test_refused_credentials_are_told_from_refused_rights(stand_in, status, said):
    stand_in.status = status
    health = judge("east", probes.ask(_gateway(stand_in), server=stand_in.url))
    assert health.reachable is True and said in health.problem
    assert len(stand_in.paths) == 1  # the first refusal stops the questions


def test_a_server_that_is_gone_is_unreachable(stand_in):
    gateway = _gateway(stand_in)
    stand_in.close()
    health = judge("east", probes.ask(gateway, server=stand_in.url))
    assert health.reachable is False and "does not answer" in health.problem
