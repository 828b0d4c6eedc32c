"""Inference services, pure: the ports a deployment serves on, its readiness and liveness
probes, the ClusterIP Service in front of it, a rollout that never runs more pods than its
replicas, and the request rate its autoscaler may hold (no I/O, no Django: tests compare dicts).

Why on the `deployment` kind and not a kind of its own: a service *is* a Deployment with ports,
probes and a Service; admission, Kueue's pod integration, the watch and the page already follow
a Deployment, and a second kind would copy all of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core.errors import InvalidInput

MAX_PORTS = 8
KUEUE_GATE = "kueue.x-k8s.io/admission"  # the gate Kueue lifts when it admits a pod
FINISHED = ("Succeeded", "Failed")
PROBE_KINDS = ("readiness", "liveness")
# IANA service name: what Kubernetes accepts as a port's name (and a probe may name).
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*$")
# A rollout replaces one pod at a time and never adds one: surge pods would need quota the
# grant may not have (Kueue would gate them and the rollout would stall), so the old pod goes
# first. Costs one replica's capacity for the length of a pod start; never exceeds the grant.
ROLLING_UPDATE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
# Requests per second per replica: thousandths at least (the HPA's quantity is then "1m").
MIN_TARGET_REQUESTS_PER_S = Decimal("0.001")
MAX_TARGET_REQUESTS_PER_S = Decimal(100_000)


@dataclass(frozen=True)
class ServicePort:
    name: str
    port: int


@dataclass(frozen=True)
class Probe:
    path: str
    port: int


def _port_number(value: Any, field: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InvalidInput(
            f"{what} must be a whole number 1–65535, not {value!r}: give the container's "
            "port, e.g. 8080",
            field=field,
        )
    return value


def check_ports(ports: Any, kind: str) -> list[dict]:
    """The validated `ports` ([{name, port}]; a bare number is named http, http-2, ...)."""
    if ports in (None, []):
        return []
    if kind != "deployment":
        raise InvalidInput("only deployments (inference services) have ports", field="ports")
    if not isinstance(ports, list) or len(ports) > MAX_PORTS:
        raise InvalidInput(
            f"ports must be a list of at most {MAX_PORTS} {{name, port}} objects", field="ports"
        )
    out: list[dict] = []
    for i, item in enumerate(ports, start=1):
        default = "http" if i == 1 else f"http-{i}"
        if isinstance(item, int) and not isinstance(item, bool):
            item = {"name": default, "port": item}
        if not isinstance(item, dict) or set(item) - {"name", "port"}:
            raise InvalidInput(f"port {i}: give {{name, port}}, e.g. 8080", field="ports")
        number = _port_number(item.get("port"), "ports", f"port {i}")
        name = item.get("name") or default
        if not isinstance(name, str) or not _PORT_NAME.match(name):
            raise InvalidInput(
                f"port {i}: name {name!r} must be 1–15 lower-case letters, digits or '-', "
                "with a letter (e.g. http)",
                field="ports",
            )
        out.append({"name": name, "port": number})
    for key in ("name", "port"):
        seen = [p[key] for p in out]
        if len(set(seen)) != len(seen):
            raise InvalidInput(f"each port needs its own {key}", field="ports")
    return out


def check_probes(probes: Any, kind: str, ports: list[dict]) -> dict:
    """The validated `probes` ({readiness?, liveness?: {path, port}}). The port is a number or
    the name of one of `ports`; it is required: a path alone says nothing about where."""
    if probes in (None, {}):
        return {}
    if kind != "deployment":
        raise InvalidInput("only deployments (inference services) have probes", field="probes")
    if not isinstance(probes, dict) or set(probes) - set(PROBE_KINDS):
        raise InvalidInput(
            "probes must be an object with readiness and/or liveness", field="probes"
        )
    named = {p["name"]: p["port"] for p in ports}
    out: dict[str, dict] = {}
    for kind_ in PROBE_KINDS:
        probe = probes.get(kind_)
        if probe is None:
            continue
        if not isinstance(probe, dict) or set(probe) - {"path", "port"}:
            raise InvalidInput(f"probes.{kind_}: give {{path, port}}", field="probes")
        path = probe.get("path")
        if not isinstance(path, str) or not _PATH.match(path) or len(path) > 200:
            raise InvalidInput(
                f"probes.{kind_}.path must start with / (e.g. /healthz), not {path!r}",
                field="probes",
            )
        port = probe.get("port")
        if port is None:
            some = f": one of {sorted(named)} or a number" if named else ", e.g. 8080"
            raise InvalidInput(
                f"probes.{kind_} has a path but no port: give probes.{kind_}.port{some}",
                field="probes",
            )
        if isinstance(port, str):
            if port not in named:
                raise InvalidInput(
                    f"probes.{kind_}.port {port!r} names no port; give one of {sorted(named)} "
                    "or a number",
                    field="probes",
                )
            port = named[port]
        out[kind_] = {"path": path, "port": _port_number(port, "probes", f"probes.{kind_}.port")}
    return out


def check_requests_per_s(value: Any) -> Decimal | None:
    """The validated request-rate target: requests per second per replica, a number with at
    most 3 decimals (a float is read as it is written: 0.1 is 0.1)."""
    if value is None:
        return None
    number = None
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    low, high = MIN_TARGET_REQUESTS_PER_S, MAX_TARGET_REQUESTS_PER_S
    if number is None or not number.is_finite() or not low <= number <= high:
        raise InvalidInput(
            f"target_requests_per_s must be a number of requests per second per replica from "
            f"{low} to {high}, e.g. 5 or 0.5, not {value!r}",
            field="autoscaling",
        )
    if number != number.quantize(low):
        raise InvalidInput(
            f"target_requests_per_s {value!r} has more than 3 decimals: round it to "
            f"{number.quantize(low)}",
            field="autoscaling",
        )
    return number.quantize(low)


def rate_quantity(per_s: Decimal) -> str:
    """A request rate as the HPA's quantity: whole numbers as they are, else thousandths
    (Decimal("0.5") is "500m")."""
    milli = int(per_s * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def service_ports(ports: list[dict]) -> tuple[ServicePort, ...]:
    return tuple(ServicePort(p["name"], int(p["port"])) for p in ports)


def service_probes(probes: dict) -> dict[str, Probe]:
    return {k: Probe(v["path"], int(v["port"])) for k, v in (probes or {}).items()}


def container_fields(ports: tuple[ServicePort, ...], probes: dict[str, Probe]) -> dict:
    """The main container's ports and probes. Liveness waits longer and tolerates more
    failures than readiness: a model that loads slowly is kept out of the Service, not
    restarted in a loop."""
    out: dict[str, Any] = {}
    if ports:
        out["ports"] = [{"name": p.name, "containerPort": p.port, "protocol": "TCP"} for p in ports]
    timing = {
        "readiness": {"periodSeconds": 5, "failureThreshold": 3},
        "liveness": {"initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 6},
    }
    for kind in PROBE_KINDS:
        if (probe := probes.get(kind)) is not None:
            out[f"{kind}Probe"] = {
                "httpGet": {"path": probe.path, "port": probe.port},
                **timing[kind],
            }
    return out


def render_service(
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    selector: dict[str, str],
    ports: tuple[ServicePort, ...],
    owner_uid: str = "",
) -> dict:
    """A ClusterIP Service over the workload's ready pods (inside the cluster only: the
    namespace's NetworkPolicy decides who reaches it). Owned by the Deployment, so the garbage
    collector deletes it with it."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": owner_uid}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [
                {"name": p.name, "port": p.port, "targetPort": p.name, "protocol": "TCP"}
                for p in ports
            ],
        },
    }


def hpa_behavior(scale_down_window_s: int) -> dict:
    """How fast the HorizontalPodAutoscaler moves: up at once (up to doubling or 4 pods per
    15 s, Kubernetes' default), down after the metric has stayed low `scale_down_window_s`."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15},
                {"type": "Pods", "value": 4, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": scale_down_window_s,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        },
    }


def replica_counts(deployment: dict | None, pods: list[dict]) -> tuple[int, int | None]:
    """(pods holding quota, replicas wanted) of a Deployment as the cluster shows it: a pod
    holds its team's quota once Kueue lifted its admission gate, until it ends or is deleted;
    the replicas wanted are the Deployment's, as its autoscaler last set them (pure)."""
    held = 0
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        ending = (pod.get("metadata") or {}).get("deletionTimestamp")
        if KUEUE_GATE not in gates and not ending and status.get("phase") not in FINISHED:
            held += 1
    wanted = ((deployment or {}).get("spec") or {}).get("replicas")
    return held, (int(wanted) if wanted is not None else None)
