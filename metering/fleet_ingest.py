"""A minute of metering across a fleet (issue 54): the portal's own cluster and then each
worker, read through its door and recorded under its name (its pods' intervals are priced with
its price factor), and the minute's per-team samples added up over all of them. A worker that
does not answer is skipped for the minute: its pods' intervals stay open and are closed, or
go on, at its next reading. A single cluster is metered exactly as before.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from core.errors import ClusterError
from metering import ingest
from scheduler.cluster import doors, fleet
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster

log = logging.getLogger(__name__)


def ingest_fleet(home: KubeGateway, *, now: datetime | None = None) -> list[ingest.IngestResult]:
    """The home cluster's reading first, then each active worker's (utilisation is read from
    the portal's Prometheus, which scrapes the home cluster: a worker's use is unknown)."""
    workers = list(Cluster.objects.workers())
    if not workers:
        return [ingest.ingest_allocations(home, now=now)]
    now = now or timezone.now()  # one minute for all of them
    results = [
        ingest.ingest_allocations(
            home, cluster_name=fleet.home_cluster_name(), now=now, samples=False
        )
    ]
    for worker in workers:
        try:
            results.append(
                ingest.ingest_allocations(
                    doors.door(worker.name),
                    cluster_name=worker.name,
                    now=now,
                    prometheus_url="",
                    samples=False,
                )
            )
        except ClusterError as exc:
            log.warning("metering skipped worker %s this minute: %s", worker.name, exc)
    ingest.write_samples_of(results)
    return results
