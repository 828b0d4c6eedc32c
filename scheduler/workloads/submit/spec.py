"""What a team asks to run, as one typed value (`WorkloadSpec`), parsed and checked once from
whatever door it came through: the API's JSON, the browser's form, the CLI (which speaks the
API). Every check that needs no database runs here and every bad field is said in one answer;
admission (`scheduler.workloads.services.submit_workload`) then checks what needs the database
under the tenant's lock.

The spec has small parts, each for one concern: the container, the size (replicas, a gang's pods,
autoscaling), placement (a gang's topology) and serving (ports, probes). What this round adds
fits beside them: a workload the portal did not create has no spec (it is found, not asked), a
DRA claim is a part of its own, a target cluster one field of the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.core.exceptions import ValidationError

from core.errors import InvalidInput, ServiceError
from scheduler.workloads.kinds import serving
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload
from scheduler.workloads.submit.input import (
    MAX_BACKOFF_LIMIT,
    MAX_REPLICAS,
    check_autoscaling,
    check_env,
    check_fits_namespace,
    check_image,
    check_labels,
    check_quantity,
    check_secret_names,
    check_shm,
    check_strings,
    check_volumes,
)
from tenants.models.priority_classes import PRIORITY_CLASSES
from tenants.models.tenants import dns_label

T = TypeVar("T")

# What a workload asks of its pod besides GPUs: stored, rendered, shown and audited alike.
POD_SPEC_FIELDS = (
    "cpu",
    "memory",
    "ephemeral_storage",
    "shm",
    "volumes",
    "env_from_secrets",
    "image_pull_secrets",
)
# The fields a submit takes, in the order their errors are said.
FIELDS = (
    "name",
    "kind",
    "image",
    "command",
    "args",
    "env",
    "labels",
    "resources",
    "priority",
    "replicas",
    "pods",
    "autoscaling",
    "backoff_limit",
    "topology",
    *POD_SPEC_FIELDS,
    "ports",
    "probes",
)


@dataclass(frozen=True)
class Container:
    """What runs and what it asks for besides GPUs: requests = limits ("" is the namespace's
    default), claims and Secrets of the team's namespace by name."""

    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: Mapping[str, Any] = field(default_factory=dict)
    cpu: str = ""
    memory: str = ""
    ephemeral_storage: str = ""
    shm: str = ""
    volumes: tuple[Mapping[str, Any], ...] = ()
    env_from_secrets: tuple[str, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Size:
    """How many pods: a deployment's replicas (an autoscaled one's minimum), a job's gang."""

    pods: int = DEFAULT_REPLICAS
    autoscaling: Mapping[str, Any] | None = None  # min/max replicas and targets

    @property
    def most_pods(self) -> int:
        return self.autoscaling["max_replicas"] if self.autoscaling else self.pods


@dataclass(frozen=True)
class Serving:
    """An inference service's ports and probes (`scheduler.workloads.kinds.serving`)."""

    ports: tuple[Mapping[str, Any], ...] = ()
    probes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadSpec:
    """What a team asks to run, checked: made by `parse_spec` (never by hand, so every door
    applies the same checks) and taken whole by `submit_workload`."""

    name: str
    kind: str
    priority: str
    resources: Mapping[str, int]  # resource class slug -> units per pod
    container: Container
    size: Size = Size()
    topology: str = ""  # a gang's placement, as asked; checked against the fleet at admission
    serving: Serving = Serving()
    labels: Mapping[str, str] = field(default_factory=dict)
    backoff_limit: int = 0


class Refusals:
    """Runs each check, keeps what it refused, and raises them all at once (the spec's checks
    here, admission's in `submit.admission.check_ask`: one answer names every bad field)."""

    def __init__(self) -> None:
        self.refused: list[tuple[str, ServiceError]] = []  # (field, refusal), in order

    def check(self, name: str, check: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        try:
            return check(*args, **kwargs)
        except ServiceError as exc:
            if not exc.field and not name:
                raise  # not about a field (a suspended team): said on its own
            self.refuse(exc.field or name, exc)
            return None

    def refuse(self, name: str, exc: ServiceError) -> None:
        self.refused.append((name, exc))

    def ok(self, *names: str) -> bool:
        return not any(field in names for field, _ in self.refused)

    def raise_any(self) -> None:
        if len(self.refused) == 1:  # as it was raised: its code (e.g. image_not_allowed) too
            raise self.refused[0][1]
        if self.refused:
            errors: dict[str, list[str]] = {}
            for field, exc in sorted(self.refused, key=lambda r: _field_order(r[0])):
                errors.setdefault(field, []).append(exc.detail)
            combined = InvalidInput.of_fields(errors)
            combined.refused = list(self.refused)  # each with its own code, for a form's map
            raise combined


def _field_order(name: str) -> int:
    return FIELDS.index(name) if name in FIELDS else len(FIELDS)


def parse_spec(data: Mapping[str, Any]) -> WorkloadSpec:
    """The spec of a submit's fields (as the API's JSON names them), or `InvalidInput` naming
    every field that is wrong; `QuotaExceeded` for what no namespace can ever hold."""
    unknown = set(data) - set(FIELDS)
    if unknown:
        raise InvalidInput(f"unknown fields {sorted(unknown)}; a submit takes {list(FIELDS)}")
    bad = Refusals()
    name = bad.check("name", _name, data.get("name"))
    kind = bad.check("kind", _kind, data.get("kind"))
    image = data.get("image")
    bad.check("image", check_image, image)
    command = bad.check("command", check_strings, data.get("command"), "command")
    args = bad.check("args", check_strings, data.get("args"), "args")
    env = bad.check("env", check_env, data.get("env"))
    labels = bad.check("labels", check_labels, data.get("labels"))
    resources = bad.check("resources", _resources, data.get("resources"))
    priority = bad.check("priority", _priority, data.get("priority"))
    size = None
    if kind is not None:
        size = bad.check("replicas", _size, kind, data)
    backoff_limit = bad.check("backoff_limit", _backoff_limit, data.get("backoff_limit", 0))
    quantities = {
        q: bad.check(q, check_quantity, data.get(q), q)
        for q in ("cpu", "memory", "ephemeral_storage")
    }
    shm = None
    if bad.ok("memory"):
        shm = bad.check("shm", check_shm, data.get("shm"), quantities["memory"])
    volumes = bad.check("volumes", check_volumes, data.get("volumes"))
    env_from = bad.check(
        "env_from_secrets", check_secret_names, data.get("env_from_secrets"), "env_from_secrets"
    )
    pulls = bad.check(
        "image_pull_secrets",
        check_secret_names,
        data.get("image_pull_secrets"),
        "image_pull_secrets",
    )
    ports = probes = None
    if kind is not None:
        ports = bad.check("ports", serving.check_ports, data.get("ports"), kind)
        if ports is not None:
            probes = bad.check("probes", serving.check_probes, data.get("probes"), kind, ports)
    topology = data.get("topology") or ""
    if not isinstance(topology, str):
        bad.refuse(
            "topology", InvalidInput("topology is a text, e.g. rack-required", field="topology")
        )
    bad.raise_any()
    assert name is not None and kind is not None and size is not None  # noqa: S101 (raised above)
    container = Container(
        image=str(image),  # checked above
        command=tuple(command or ()),
        args=tuple(args or ()),
        env=env or {},
        cpu=quantities["cpu"] or "",
        memory=quantities["memory"] or "",
        ephemeral_storage=quantities["ephemeral_storage"] or "",
        shm=shm or "",
        volumes=tuple(volumes or ()),
        env_from_secrets=tuple(env_from or ()),
        image_pull_secrets=tuple(pulls or ()),
    )
    # the namespace's cpu/memory backstop is fixed: the most pods must fit it
    check_fits_namespace(
        {q: getattr(container, q) for q in ("cpu", "memory", "ephemeral_storage", "shm")},
        size.most_pods,
    )
    return WorkloadSpec(
        name=name,
        kind=kind,
        priority=priority or "",
        resources=resources or {},
        container=container,
        size=size,
        topology=topology,
        serving=Serving(ports=tuple(ports or ()), probes=probes or {}),
        labels=labels or {},
        backoff_limit=backoff_limit or 0,
    )


def workload_spec(**fields: Any) -> WorkloadSpec:
    """`parse_spec` of keyword arguments: `workload_spec(name="train", kind="job", ...)`."""
    return parse_spec(fields)


def _name(name: Any) -> str:
    try:
        dns_label(name if isinstance(name, str) else "")
    except ValidationError as exc:
        raise InvalidInput(f"name {name!r}: {exc.messages[0]}", field="name") from None
    return name


def _kind(kind: Any) -> str:
    if kind not in Workload.Kind.values:
        raise InvalidInput(f"kind must be one of {Workload.Kind.values}", field="kind")
    return kind


def _priority(priority: Any) -> str:
    if priority not in PRIORITY_CLASSES:
        raise InvalidInput(f"priority must be one of {list(PRIORITY_CLASSES)}", field="priority")
    return priority


def _resources(resources: Any) -> dict[str, int]:
    """The shape of the ask (class slug -> whole units ≥ 1); which classes exist and whether they
    are one model's is admission's (it reads the catalog)."""
    if not isinstance(resources, dict) or not resources:
        raise InvalidInput(
            "ask for at least one resource class, e.g. {'a100-80gb-mig-3g.40gb': 1}",
            field="resources",
        )
    for slug, units in resources.items():
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise InvalidInput(f"{slug}: units must be a whole number ≥ 1", field="resources")
    return dict(resources)


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{name} must be a whole number ≥ 1", field=name)
    return value


def _size(kind: str, data: Mapping[str, Any]) -> Size:
    """A deployment's replicas (or its autoscaling range), a job's pods (a gang when > 1)."""
    replicas = _whole(data.get("replicas", DEFAULT_REPLICAS), "replicas")
    if kind == Workload.Kind.JOB and replicas != 1:
        raise InvalidInput(
            "a job's pods are `pods` (a gang that starts together), not replicas: "
            "leave replicas at 1",
            field="replicas",
        )
    pods = data.get("pods")
    if pods is not None:
        pods = _whole(pods, "pods")
        if kind != Workload.Kind.JOB and pods != 1:
            raise InvalidInput(
                "pods is for jobs (a gang of N pods); a deployment scales by replicas",
                field="pods",
            )
        if pods > MAX_REPLICAS:
            raise InvalidInput(f"at most {MAX_REPLICAS} pods", field="pods")
        if kind == Workload.Kind.JOB:
            replicas = pods  # stored as the job's replicas: the pods it runs at once
    if replicas > MAX_REPLICAS:
        raise InvalidInput(f"at most {MAX_REPLICAS} replicas", field="replicas")
    scaling = check_autoscaling(data.get("autoscaling"), kind, replicas)
    if scaling is not None:
        replicas = scaling["min_replicas"]
    return Size(pods=replicas, autoscaling=scaling)


def _backoff_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BACKOFF_LIMIT:
        raise InvalidInput(f"backoff_limit must be 0–{MAX_BACKOFF_LIMIT}", field="backoff_limit")
    return value
