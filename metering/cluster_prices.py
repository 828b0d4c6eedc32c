"""Per-cluster prices: a cluster's GPU hours cost its `price_factor` times the class's list price
(a cloud worker dearer than the on-premises manager). Allocation is priced with the factor of the
cluster its pod ran on (the interval's cluster); a grant with the factor of where it places its
work: the portal's own cluster, or the one worker it names. A grant on "any cluster of" a group
is priced at the list price: the portal cannot know ahead on which of the group's workers its
work will run. A single-cluster install has factor 1 everywhere: the same figures as before."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from scheduler.cluster.models import DEFAULT_CLUSTER, Cluster

ONE = Decimal(1)
ON_CLUSTER = "cluster:"  # tenants.models.QuotaGrant.placement: "cluster:<worker>"


def placement_factor(placement: str, factors: dict[str, Decimal], home: str) -> Decimal:
    """The price factor of a grant's placement (pure): "" the portal's own cluster,
    "cluster:<name>" that cluster, anything else (a group) the list price."""
    if not placement:
        return factors.get(home, ONE)
    if placement.startswith(ON_CLUSTER):
        return factors.get(placement[len(ON_CLUSTER) :], ONE)
    return ONE


def placement_factors(placements: Iterable[str]) -> dict[str, Decimal]:
    """placement -> its price factor (one query; none for no placements)."""
    wanted = set(placements)
    if not wanted:
        return {}
    factors: dict[str, Decimal] = {}
    home = DEFAULT_CLUSTER
    for name, role, factor in Cluster.objects.values_list("name", "role", "price_factor"):
        factors[name] = factor
        if role != Cluster.Role.WORKER and name != DEFAULT_CLUSTER:
            home = name
    return {p: placement_factor(p, factors, home) for p in wanted}
