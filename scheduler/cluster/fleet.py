"""Clusters as the platform team registers them: the portal's own cluster (standalone, or the
manager of a fleet) and the workers MultiKueue dispatches to, each with its region, order of
preference, group and the Secret that holds its kubeconfig. Every change is checked (a 400
that says what to change), audited, and made under a lock on the clusters, so two
registrations cannot both make a cluster the portal's own. Health checks record what
scheduler/cluster/probes.py judged, audited when it changes.
"""

from __future__ import annotations

import logging
import re
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core import audit
from core.errors import ClusterError, InvalidInput, InvalidTransition
from core.permissions import require_platform_admin
from scheduler.cluster import doors, probes
from scheduler.cluster.models import DEFAULT_CLUSTER, Cluster

log = logging.getLogger(__name__)
Role = Cluster.Role
HOME_ROLES = (Role.STANDALONE, Role.MANAGER)
EDITABLE = (
    "role",
    "region",
    "preference",
    "group",
    "price_factor",
    "credentials_secret_namespace",
    "credentials_secret_name",
)
FIELDS = ["name", *EDITABLE]
HEALTH_FIELDS = ["reachable", "kueue_version", "last_error"]
MAX_NAME = 40  # MultiKueue's objects and the Secret copy are named after it, with a prefix
MAX_PREFERENCE = 1000
# A cluster's GPU hours cost this many times the list price: above 0, at most 100, to 3 places
# (the column's scale).
MAX_PRICE_FACTOR = Decimal(100)
PRICE_FACTOR_PLACES = Decimal("0.001")

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_problem(value: str, max_len: int = 63) -> str:
    if len(value) > max_len or not _LABEL.match(value):
        return (
            f"{value!r} is not a DNS label: at most {max_len} lower-case letters, digits and "
            "dashes, starting and ending with a letter or digit"
        )
    return ""


def price_factor_of(value) -> Decimal | None:
    """A price factor as sent (a number or its text), or None when it is not a number."""
    if isinstance(value, bool):
        return None
    try:
        factor = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return factor if factor.is_finite() else None


def _price_factor_problem(value) -> str:
    factor = price_factor_of(value)
    if factor is None or not 0 < factor <= MAX_PRICE_FACTOR:
        return (
            f"{value!r} is not a price factor: a number above 0 and at most {MAX_PRICE_FACTOR} "
            "(1: the class's list price; 1.5: half as dear again)"
        )
    if factor != factor.quantize(PRICE_FACTOR_PLACES):
        return f"{value!r} has more than 3 decimal places: round it (e.g. 1.125)"
    return ""


def _field_problems(values: dict) -> dict[str, list[str]]:
    """What is wrong with each field on its own."""
    errors: dict[str, list[str]] = {}
    if problem := _label_problem(values["name"], MAX_NAME):
        errors["name"] = [problem]
    if values["role"] not in Role.values:
        errors["role"] = [f"{values['role']!r} is not a role: say one of {', '.join(Role.values)}"]
    for field in ("region", "group"):
        if values[field] and (
            problem := _label_problem(values[field], 63 if field == "region" else MAX_NAME)
        ):
            errors[field] = [problem]
    preference = values["preference"]
    if (
        not isinstance(preference, int)
        or isinstance(preference, bool)
        or not 0 <= preference <= MAX_PREFERENCE
    ):
        errors["preference"] = [f"a whole number from 0 (tried first) to {MAX_PREFERENCE}"]
    if problem := _price_factor_problem(values["price_factor"]):
        errors["price_factor"] = [problem]
    namespace, secret = values["credentials_secret_namespace"], values["credentials_secret_name"]
    if values["role"] == Role.WORKER:
        if not secret:
            errors["credentials_secret_name"] = [
                "a worker is reached through a kubeconfig Secret on the manager: name it"
            ]
        elif len(secret) > 253 or not _SUBDOMAIN.match(secret):
            errors["credentials_secret_name"] = [f"{secret!r} is not a Secret name (DNS-1123)"]
        if namespace and (problem := _label_problem(namespace)):
            errors["credentials_secret_namespace"] = [problem]
    elif values["role"] in HOME_ROLES:
        if secret or namespace:
            errors["credentials_secret_name"] = [
                "the manager or standalone cluster is the portal's own, reached through its own "
                "configuration (KUBECONFIG or its ServiceAccount): leave the Secret empty"
            ]
        if values["group"]:
            errors["group"] = [
                "only workers are in groups: the manager runs work only through queues of its own"
            ]
    return errors


def _fleet_problems(values: dict, others: list[Cluster]) -> dict[str, list[str]]:
    """What is wrong with the fleet the change would make (`others`: every other active
    cluster, locked)."""
    home = next((c for c in others if c.role in HOME_ROLES), None)
    workers = sorted(c.name for c in others if c.role == Role.WORKER)
    role = values["role"]
    if role in HOME_ROLES and home is not None:
        return {
            "role": [
                f"cluster {home.name} is already the portal's own ({home.role}); a fleet has one "
                "manager and workers"
            ]
        }
    if role == Role.STANDALONE and workers:
        return {
            "role": [
                f"workers {', '.join(workers)} are registered: archive them first, or keep this "
                "cluster the manager"
            ]
        }
    if role == Role.WORKER and (home is None or home.role != Role.MANAGER):
        first = (
            "register the portal's own cluster as the manager first"
            if home is None
            else f"make {home.name} the manager first (it is {home.role})"
        )
        return {"role": [f"a worker needs a manager to dispatch to it: {first}"]}
    return {}


def _check(values: dict, *, exclude: int | None = None) -> None:
    errors = _field_problems(values)
    if not errors:
        others = list(
            Cluster.objects.select_for_update().active().exclude(pk=exclude).order_by("pk")
        )
        errors = _fleet_problems(values, others)
    if errors:
        raise InvalidInput.of_fields(errors)


def _defaults(values: dict) -> dict:
    if not _price_factor_problem(values["price_factor"]):
        # to the column's scale (nothing lost: checked), so an unchanged one is not a change
        values["price_factor"] = Decimal(str(values["price_factor"]).strip()).quantize(
            PRICE_FACTOR_PLACES
        )
    if values["role"] == Role.WORKER and not values["credentials_secret_namespace"]:
        # MultiKueue reads kubeconfigs from Kueue's own namespace: there, no copy is needed.
        values["credentials_secret_namespace"] = settings.KUEUE_CONFIG_NAMESPACE
    return values


# What a registration leaves unsaid: a worker at the default order, at the list price.
NEW_CLUSTER = {
    "role": Role.WORKER,
    "region": "",
    "preference": 100,
    "group": "",
    "price_factor": 1,
    "credentials_secret_namespace": "",
    "credentials_secret_name": "",
}


def register_cluster(*, actor, name: str, **fields) -> Cluster:
    """Register a cluster (a worker unless said otherwise; `fields` among EDITABLE). Its health
    is unknown until the first check (`check_cluster`)."""
    require_platform_admin(actor, "register clusters")
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise InvalidInput(
            f"cannot set {', '.join(sorted(unknown))} (may set: {', '.join(EDITABLE)})",
            field=min(unknown),
        )
    values = _defaults({"name": name, **NEW_CLUSTER, **fields})
    with transaction.atomic():
        _check(values)
        cluster = Cluster(**values)
        try:
            with transaction.atomic():
                cluster.save()
        except IntegrityError:
            raise InvalidInput(
                f"a cluster {name!r} is registered already (archived ones keep their name)",
                field="name",
            ) from None
        audit.record(
            actor=actor,
            verb="cluster.registered",
            obj=cluster,
            tenant=None,
            after=audit.snapshot(cluster, FIELDS),
        )
        transaction.on_commit(lambda: doors.forget(cluster.name))
    return cluster


def update_cluster(*, actor, cluster: Cluster, **fields) -> Cluster:
    """Change what the platform team may change of a cluster (its name never: MultiKueue's
    objects and the cluster's usage are keyed by it)."""
    require_platform_admin(actor, "change clusters")
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise InvalidInput(
            f"cannot change {', '.join(sorted(unknown))} (may change: {', '.join(EDITABLE)})",
            field=min(unknown),
        )
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        if locked.archived_at is not None:
            raise InvalidTransition(f"cluster {locked.name} is archived: nothing of it changes")
        before = audit.snapshot(locked, FIELDS)
        values = _defaults({**before, **fields})
        _check(values, exclude=locked.pk)
        for key in EDITABLE:
            setattr(locked, key, values[key])
        locked.save(update_fields=list(EDITABLE))
        after = audit.snapshot(locked, FIELDS)
        if after != before:
            audit.record(
                actor=actor,
                verb="cluster.updated",
                obj=locked,
                tenant=None,
                before=before,
                after=after,
            )
        transaction.on_commit(lambda: doors.forget(locked.name))
    return locked


def check_cluster(cluster: Cluster) -> probes.ClusterHealth:
    """Ask the cluster (outside any transaction) and record what `probes.judge` says."""
    try:
        answers = probes.ask(doors.door(cluster.name), server=cluster.api_server)
    except doors.CredentialsProblem as exc:
        answers = probes.Answers(credentials=str(exc))
    except ClusterError as exc:
        answers = probes.Answers(server=cluster.api_server, failure=str(exc))
    health = probes.judge(cluster.name, answers, multikueue=cluster.role != Role.STANDALONE)
    record_health(cluster, health)
    return health


def record_health(cluster: Cluster, health: probes.ClusterHealth) -> Cluster:
    """Write a health verdict; one audit event when it changes (not on every check)."""
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        before = audit.snapshot(locked, HEALTH_FIELDS)
        locked.reachable = health.reachable
        locked.kueue_version = health.kueue_version
        locked.last_error = health.problem[:2000]
        locked.checked_at = timezone.now()
        locked.save(update_fields=[*HEALTH_FIELDS, "checked_at"])
        after = audit.snapshot(locked, HEALTH_FIELDS)
        if after != before:
            audit.record(
                actor=None,
                verb="cluster.health_changed",
                obj=locked,
                tenant=None,
                before=before,
                after=after,
            )
    return locked


def check_clusters() -> dict[str, str]:
    """`check_cluster` for every active cluster, each on its own: an error of one (its
    database row gone meanwhile, a bug in a probe) is logged and the others are still checked.
    Cluster name -> "ok" or what its check found wrong."""
    said: dict[str, str] = {}
    for cluster in Cluster.objects.active().order_by("name"):
        try:
            health = check_cluster(cluster)
        except Exception as exc:  # one cluster's failure must not stop the rest
            log.exception("health check of cluster %s failed", cluster.name)
            said[cluster.name] = f"not checked: {exc}"
            continue
        said[cluster.name] = health.problem or "ok"
    return said


def home_cluster_name() -> str:
    """The name the portal's own cluster is recorded under: the active standalone or manager
    cluster, else the default a single-cluster install has always used."""
    home = (
        Cluster.objects.active().filter(role__in=HOME_ROLES).values_list("name", flat=True).first()
    )
    return home or DEFAULT_CLUSTER


def fleet_problems() -> dict[str, str]:
    """Cluster name -> what its last check found wrong, for `/readyz` and the console."""
    return dict(
        Cluster.objects.active()
        .exclude(last_error="")
        .order_by("name")
        .values_list("name", "last_error")
    )
