"""Fixtures of the tests that read DCGM through Prometheus (metering, GPU health): a real
Prometheus scraping a DCGM stand-in."""

import pytest

from demo.dcgm import DcgmStandin
from demo.prometheus import PrometheusServer


@pytest.fixture
def dcgm(kube):
    """A DCGM exporter stand-in for the test's namespaces (add them to `.namespaces`)."""
    standin = DcgmStandin(kube)
    port = standin.start()
    standin.target = f"127.0.0.1:{port}"
    yield standin
    standin.stop()


@pytest.fixture
def prometheus_server(dcgm):
    """Debian's prometheus on 127.0.0.1, scraping the stand-in every second."""
    if PrometheusServer.binary() is None:
        pytest.fail("Debian's prometheus package is missing: run scripts/bootstrap.sh")
    server = PrometheusServer([dcgm.target])
    server.start()
    yield server
    server.stop()
