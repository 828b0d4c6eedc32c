"""Desired state from the database: the TenantSpecs, FlavorSpecs and PriorityClassSpecs that
`scheduler.cluster.render` turns into manifests, built for many tenants in a fixed number of
queries.

A tenant the `queue_holds` hook names (metering: over budget) gets a held LocalQueue in its
spec, so work submitted with kubectl waits too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings

from catalog import dra_quota, gpu_serving, kueue_integrations, slices
from catalog.models import Pool, ResourceClass
from catalog.product_labels import product_label
from core.names import dns_label
from scheduler.cluster import dispatch
from scheduler.cluster.render.namespace import DEVICES_PER_CLASS
from scheduler.cluster.render.specs import (
    FlavorSpec,
    Member,
    PriorityClassSpec,
    QueueLine,
    TenantSpec,
)
from tenants import group_mapping, hooks
from tenants.models import Department, Membership, Tenant
from tenants.models.priority_classes import CRITICAL_PRIORITY_CLASS, PRIORITY_CLASS_DEFS
from tenants.selectors import effective_quotas, granted_totals

# Kubernetes' ResourceQuota names for the claims of the driver's two classes, counted by device
MIG_DEVICES = f"{dra_quota.MIG_CLASS}{DEVICES_PER_CLASS}"
GPU_DEVICES = f"{dra_quota.GPU_CLASS}{DEVICES_PER_CLASS}"


def priority_class_specs() -> list[PriorityClassSpec]:
    return [
        PriorityClassSpec(name=pc.name, value=pc.value, description=pc.description)
        for pc in PRIORITY_CLASS_DEFS
    ]


def flavor_name(gpu_model: str) -> str:
    """The Kueue ResourceFlavor of a GPU model (catalog key A100-80GB -> a100-80gb)."""
    return gpu_model.lower()


def flavor_specs(classes: Iterable[ResourceClass] | None = None) -> list[FlavorSpec]:
    """One flavor per GPU model that has an active class; the product label GFD sets comes from
    `GPU_PRODUCT_LABELS` or the catalog (a model neither knows gets GFD's usual
    `NVIDIA-<model>`), and the tolerations from `GPU_NODE_TOLERATIONS`."""
    if classes is None:
        classes = ResourceClass.objects.filter(active=True)
    models = sorted({rc.gpu_model for rc in classes if rc.active})
    tolerations = tuple(settings.GPU_NODE_TOLERATIONS)
    return [
        FlavorSpec(
            name=flavor_name(model),
            product_label=product_label(model),
            tolerations=tolerations,
        )
        for model in models
    ]


def queue_lines(
    classes: dict[int, ResourceClass],
    pools: dict[int, Pool],
    granted: dict[int, int],
    *,
    unit: str = slices.UNIT_CLASS,
) -> tuple[QueueLine, ...]:
    """Every (flavor, resource) a tenant's ClusterQueue lists: nominal = its grants, borrowing
    and lending from the pool's policy; the other resource names of a flavor are left to
    render (zero: Kueue wants each flavor to list every resource of its group).

    In slices (`GPU_QUOTA_UNIT`), a model's classes fold into one line of `SLICE_RESOURCE`:
    each unit counts its slices, so a grant of 7 x 1g serves a 4g and a 3g ask, or a whole GPU,
    as Kueue's transformations count them."""
    lines: dict[tuple[str, str], QueueLine] = {}
    for rc in classes.values():
        if not rc.active:
            continue
        pool = pools.get(rc.pk)
        if unit == slices.UNIT_SLICES:
            per, name = slices.slices_per_unit(rc), slices.SLICE_RESOURCE
        else:
            per, name = 1, rc.resource_name
        limit = pool.borrowing_limit if pool else 0
        key = (flavor_name(rc.gpu_model), name)
        previous = lines.get(key)
        lines[key] = QueueLine(
            flavor=key[0],
            resource_name=name,
            nominal=granted.get(rc.pk, 0) * per + (previous.nominal if previous else 0),
            borrowing_limit=_wider(
                None if limit is None else limit * per,
                previous.borrowing_limit if previous else 0,
            ),
            lend=(pool.lend_idle if pool else True) and (previous.lend if previous else True),
        )
    if unit == slices.UNIT_SLICES:
        _to_multiprocessors(lines, classes.values())
    return tuple(lines[k] for k in sorted(lines))


def _to_multiprocessors(
    lines: dict[tuple[str, str], QueueLine], classes: Iterable[ResourceClass]
) -> None:
    """A DRA-served model's line in Kueue's DRA quota resource: its slices as the driver's
    multiprocessors, rounded up on the line as a whole (catalog/dra_quota.py: exact on an A100,
    up to 18% more 1g/2g/4g on an H100 between multiples of 7)."""
    for model in sorted({rc.gpu_model for rc in classes if gpu_serving.through_dra(rc.gpu_model)}):
        line = lines.pop((flavor_name(model), slices.SLICE_RESOURCE), None)
        if line is None:
            continue
        limit = line.borrowing_limit
        lines[(line.flavor, dra_quota.QUOTA_RESOURCE)] = QueueLine(
            flavor=line.flavor,
            resource_name=dra_quota.QUOTA_RESOURCE,
            nominal=dra_quota.slice_quota(model, line.nominal),
            borrowing_limit=None if limit is None else dra_quota.slice_quota(model, limit),
            lend=line.lend,
        )


def dra_devices_quota(model: str, multiprocessors: int) -> dict[str, int]:
    """The namespace's ResourceQuota under Kueue for a DRA model's line of `multiprocessors`:
    claims of the driver's classes counted by device (Kubernetes' `<class>.deviceclass.
    resource.k8s.io/devices`), as many as the smallest device of each class fits in it. A
    backstop only: Kueue charges the multiprocessors."""
    gpu = dra_quota.dra_model(model)
    smallest = min((p.multiprocessors for p in gpu.profiles.values()), default=gpu.multiprocessors)
    return {
        MIG_DEVICES: multiprocessors // smallest,
        GPU_DEVICES: multiprocessors // gpu.multiprocessors,
    }


def backstop_quota(
    lines: tuple[QueueLine, ...],
    classes: dict[int, ResourceClass],
    cohort_nominal: dict[tuple[str, str], int],
    *,
    unit: str = slices.UNIT_CLASS,
) -> dict[str, int]:
    """The namespace's ResourceQuota under Kueue, per resource name: what the queue may admit
    at most (grants plus what may be borrowed; with no borrowing limit, at most what the rest
    of the cohort was granted), on any model. In slices, a model's slices allow that many
    units of each of its resources (a 14-slice line: 2 whole GPUs or 4 x 3g or 14 x 1g)."""
    cap: dict[tuple[str, str], int] = {}
    for line in lines:
        if not (line.nominal or line.borrowing_limit):
            continue
        key = (line.flavor, line.resource_name)
        others = max(0, cohort_nominal.get(key, 0) - line.nominal)
        borrow = others if line.borrowing_limit is None else line.borrowing_limit
        cap[key] = line.nominal + borrow
    out: dict[str, int] = defaultdict(int)
    if unit != slices.UNIT_SLICES:
        for (_, name), units in cap.items():
            out[name] += units
        return dict(out)
    names_by_model: dict[str, dict[str, int]] = defaultdict(dict)
    models = {}
    for rc in classes.values():
        if rc.active:
            names_by_model[flavor_name(rc.gpu_model)][rc.resource_name] = slices.slices_per_unit(rc)
            models[flavor_name(rc.gpu_model)] = rc.gpu_model
    for (flavor, name), units in cap.items():
        if name == dra_quota.QUOTA_RESOURCE:
            for device_name, devices in dra_devices_quota(models[flavor], units).items():
                out[device_name] += devices
            continue
        for resource, per in names_by_model[flavor].items():
            out[resource] += units // per
    return dict(out)


def _wider(a: int | None, b: int | None) -> int | None:
    """The larger of two borrowing limits, None (no limit) being the largest."""
    return None if a is None or b is None else max(a, b)


def provider_groups_by_tenant() -> dict[str, list[tuple[str, str]]]:
    """tenant slug -> [(group, role)]: the identity provider's groups that OIDC_GROUP_MAP names,
    bound in the cluster as its members are (a pattern names no group in advance: those people
    are bound by name once they have signed in). Empty while group mapping is off or its
    settings are malformed: then sign-in changes nothing either."""
    mapping = group_mapping.mapping_in_force()
    if mapping is None:
        return {}
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for group, targets in mapping.by_group.items():
        for tenant, role in targets:
            out[tenant].append((group, role))
    return out


def build_specs(
    tenants: list[Tenant], *, frameworks: tuple[str, ...] = ()
) -> dict[int, TenantSpec]:
    """TenantSpecs for many tenants in a fixed number of queries. `frameworks`: the Kueue
    integrations members may create the kinds of (those enabled whose CRD the cluster serves,
    kueue_settings.Verdict.usable); none beyond the built-in kinds without."""
    ids = [t.pk for t in tenants]
    groups = provider_groups_by_tenant()
    classes = {rc.pk: rc for rc in ResourceClass.objects.all()}
    pools = {p.resource_class_id: p for p in Pool.objects.all()}
    graces = reclaim_graces(classes, pools)
    resource_names = tuple(sorted({rc.resource_name for rc in classes.values() if rc.active}))
    if gpu_serving.dra_models():  # claims of the driver's classes: none beyond the grant
        resource_names += (MIG_DEVICES, GPU_DEVICES)
    quotas = effective_quotas(ids)
    held = hooks.queue_holds(ids)  # metering's over-budget teams (portal/wiring.py)
    members: dict[int, list[Member]] = defaultdict(list)
    robots = {t.robot_id for t in tenants if t.robot_id}
    for m in Membership.objects.filter(tenant_id__in=ids).select_related("user"):
        members[m.tenant_id].append(
            Member(m.user.get_username(), m.role, is_robot=m.user_id in robots)
        )
    priority_names = tuple(pc.name for pc in priority_class_specs())
    framework_apis = kueue_integrations.role_apis(frameworks)
    unit = settings.GPU_QUOTA_UNIT
    # a team in a department queues in the department's Cohort (render/cohorts.py)
    in_department = {t.department_id for t in tenants if t.department_id}
    department_slugs = (
        dict(Department.objects.filter(pk__in=in_department).values_list("pk", "slug"))
        if in_department
        else {}
    )
    # every team's grants, for the backstop of lines that may borrow without a limit
    cohort_nominal: dict[tuple[str, str], int] = defaultdict(int)
    for line in queue_lines(classes, pools, granted_totals(), unit=unit):
        cohort_nominal[(line.flavor, line.resource_name)] += line.nominal
    fleet = dispatch.fleet_plan(ids)  # empty for a single cluster: two queries at most
    specs = {}
    for t in tenants:
        lines = queue_lines(classes, pools, quotas.get(t.pk, {}), unit=unit)
        specs[t.pk] = TenantSpec(
            slug=t.slug,
            name=t.name,
            active=t.status == Tenant.Status.ACTIVE,
            gpu_quota=backstop_quota(lines, classes, cohort_nominal, unit=unit),
            gpu_resource_names=resource_names,
            members=tuple(members[t.pk]),
            allowed_priority_classes=tuple(t.allowed_priority_classes or ()),
            all_priority_classes=priority_names,
            critical_priority_class=CRITICAL_PRIORITY_CLASS,
            critical_units=t.critical_gpu_quota,
            platform_namespace=settings.PLATFORM_NAMESPACE,
            platform_web_pod_labels=tuple(sorted(settings.PLATFORM_WEB_POD_LABELS.items())),
            platform_web_port=settings.PLATFORM_WEB_PORT,
            workspace_ingress_namespace=settings.WORKSPACE_INGRESS_NAMESPACE,
            namespace_prefix=settings.TENANT_NAMESPACE_PREFIX,
            cpu_quota=settings.TENANT_CPU_QUOTA,
            memory_quota=settings.TENANT_MEMORY_QUOTA,
            ephemeral_storage_quota=settings.TENANT_EPHEMERAL_STORAGE_QUOTA,
            pod_quota=settings.TENANT_POD_QUOTA,
            pvc_quota=settings.TENANT_PVC_QUOTA,
            storage_quota=settings.TENANT_STORAGE_QUOTA,
            container_max={
                "cpu": settings.WORKLOAD_MAX_CPU,
                "memory": settings.WORKLOAD_MAX_MEMORY,
                "ephemeral-storage": settings.WORKLOAD_MAX_EPHEMERAL_STORAGE,
            },
            user_prefix=settings.KUBE_USER_PREFIX,
            provider_groups=tuple(sorted(groups.get(t.slug, ()))),
            group_prefix=settings.KUBE_GROUP_PREFIX,
            pod_exec=settings.TENANT_POD_EXEC,
            egress_allowed_cidrs=tuple(settings.TENANT_EGRESS_ALLOWED_CIDRS),
            egress_denied_cidrs=tuple(settings.TENANT_EGRESS_DENIED_CIDRS),
            dns_namespace=settings.CLUSTER_DNS_NAMESPACE,
            dns_pod_labels=tuple(sorted(settings.CLUSTER_DNS_POD_LABELS.items())),
            instance=settings.PORTAL_INSTANCE,
            # Kueue's reclaim policy is one per queue: one line this team lends with a grace
            # hands its reclaiming to the portal, which applies each line's grace (0: at once)
            reclaim_by_portal=any(
                line.nominal and graces.get((line.flavor, line.resource_name), 0) > 0
                for line in lines
            ),
            queue_lines=lines,
            cohort=(
                department_cohort(department_slugs[t.department_id])
                if t.department_id in department_slugs
                else cohort_name()
            ),
            queue_held=t.pk in held,
            fair_share_weight=format(t.fair_share_weight.normalize(), "f"),  # 10, not 1E+1
            framework_apis=framework_apis,
            dra_devices=dra_devices(lines, classes),
            dispatch_check=fleet.check_of(fleet.placements.get(t.pk, "")),
        )
    return specs


def dra_devices(
    lines: tuple[QueueLine, ...], classes: dict[int, ResourceClass]
) -> tuple[tuple[str, str, str], ...]:
    """(model, product label, profile or "gpu") of every device the team may ask for on the DRA
    models it has a usable line of (granted, or borrowing allowed)."""
    usable = {
        line.flavor
        for line in lines
        if line.resource_name == dra_quota.QUOTA_RESOURCE
        and (line.nominal or line.borrowing_limit != 0)
    }
    models = sorted(
        {rc.gpu_model for rc in classes.values() if flavor_name(rc.gpu_model) in usable}
    )
    return tuple(
        (model, product_label(model), profile)
        for model in models
        for profile in (*dra_quota.dra_model(model).profiles, dra_quota.WHOLE_GPU)
    )


def cohort_name() -> str:
    """One cohort per portal instance: its teams lend to and borrow from each other only."""
    return f"gpu-portal-{settings.PORTAL_INSTANCE}"


def department_cohort(slug: str) -> str:
    """A department's Cohort, under the instance's (`cohort_name`) and named after it."""
    return dns_label(f"{cohort_name()}-{slug}")


def tenant_namespace(tenant: Tenant) -> str:
    return tenant.namespace


def reclaim_graces(
    classes: dict[int, ResourceClass], pools: dict[int, Pool]
) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> the least seconds a borrower runs before its lender takes the
    units back: a class's pool on its own line, and the largest of a model's pools on the
    model's line of GPU slices (one line serves all its classes)."""
    out: dict[tuple[str, str], int] = {}
    for rc_id, pool in pools.items():
        rc = classes.get(rc_id)
        if rc is None or not rc.active:
            continue
        flavor = flavor_name(rc.gpu_model)
        for key in ((flavor, rc.resource_name), (flavor, slices.SLICE_RESOURCE)):
            out[key] = max(out.get(key, 0), pool.reclaim_grace_s)
    return out
