"""Whether the cluster's Kueue holds every team's work to the queue: its running Configuration
(the ConfigMap its Helm chart and release manifests keep it in) must manage work without a queue
label, in the namespaces the portal labels, for every integration `KUEUE_INTEGRATIONS` enables,
and wait for pods ready. The portal prints those keys (`manage.py kueue_config`,
catalog/kueue_config.py) but cannot set them: Kueue is the platform team's.

Read at start (the first `/readyz`, the first reconcile) and again on every cluster-wide
reconcile; judged here (`judge`, pure) and said as support.py says what to upgrade: a console
banner, a `/readyz` reason, a log line, and the gauge gpu_portal_kueue_setting_missing, each
with what to set. Nothing is refused: a missing key lets work run beside the queue, which the
platform team must fix, but the grants the portal writes stay right.

Which enabled integrations' CRDs the cluster serves is read with it: a team's Role lets members
create only those kinds (`Verdict.usable`); one whose CRD is absent is reported, not
half-enabled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml
from django.conf import settings
from django.core.cache import cache

from catalog import kueue_integrations
from catalog.dra_devices import QUOTA_RESOURCE
from catalog.kueue_config import QUEUE_ENFORCED_LABEL, PodsReady, kueue_configuration

log = logging.getLogger(__name__)

CONFIG_KEY = "controller_manager_config.yaml"  # the ConfigMap's key Kueue reads (--config)
CHECK_TTL_S = 300.0  # a tenant's run trusts an earlier read this long (as its cluster objects)
CACHE_KEY = "kueue-settings"  # the last verdict, for the banner, /readyz and /metrics
# What a team namespace carries that Kueue's selector must match (render/namespace.py).
TEAM_NAMESPACE_LABELS = {QUEUE_ENFORCED_LABEL: "true"}
KUEUE_DEFAULT_FRAMEWORKS = ("batch/job",)  # what Kueue enables when the list is empty
FIX = "`manage.py kueue_config` prints it; restart kueue-controller-manager after the change"


def pods_ready_setting() -> PodsReady:
    return PodsReady(
        timeout_s=settings.KUEUE_PODS_READY_TIMEOUT_S,
        requeue_base_s=settings.KUEUE_PODS_READY_REQUEUE_BASE_S,
        requeue_max_s=settings.KUEUE_PODS_READY_REQUEUE_MAX_S,
        requeue_limit=settings.KUEUE_PODS_READY_REQUEUE_LIMIT,
        block_admission=settings.KUEUE_PODS_READY_BLOCK_ADMISSION,
    )


def expected_configuration(
    *,
    feature_gates: bool = True,
    dispatch_step: int | None = None,
    worker_lost_s: int | None = None,
) -> dict:
    """The fragment for the portal's settings (what `manage.py kueue_config` prints); with
    `dispatch_step`, a fleet's manager's (MultiKueue's incremental dispatcher, and how long a
    lost worker keeps its work: `worker_lost_s`)."""
    return kueue_configuration(
        settings.GPU_QUOTA_UNIT,
        feature_gates=feature_gates,
        pods_ready=pods_ready_setting(),
        integrations=settings.KUEUE_INTEGRATIONS,
        dra_models=settings.GPU_DRA_MODELS,
        product_overrides=settings.GPU_PRODUCT_LABELS,
        multikueue=dispatch_step,
        worker_lost_s=worker_lost_s,
    )


@dataclass(frozen=True)
class Missing:
    setting: str  # Kueue's key, e.g. "manageJobsWithoutQueueName"; or "ConfigMap", "CRD"
    want: str  # what to set, in a few words (the metric's label)
    detail: str  # the sentence the banner, /readyz and the log say


@dataclass(frozen=True)
class Facts:
    """What the cluster said: the ConfigMap (None: absent), why it could not be read, and for
    each CRD asked about whether it is there (None: the portal may not read it)."""

    config_map: dict | None
    config_error: str = ""
    crds: Mapping[str, bool | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    missing: tuple[Missing, ...] = ()
    usable: tuple[str, ...] = ()  # enabled integrations whose kinds teams may create

    @property
    def holds(self) -> bool:
        return not self.missing

    def as_dict(self) -> dict:
        return {
            "holds": self.holds,
            "missing": [
                {"setting": m.setting, "want": m.want, "detail": m.detail} for m in self.missing
            ],
            "usable": list(self.usable),
        }


def selects(selector: object, labels: Mapping[str, str]) -> bool:
    """Whether a Kubernetes label selector matches `labels` (an unknown operator: no)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _crd_findings(
    enabled: Sequence[str], crds: Mapping[str, bool | None]
) -> tuple[list[Missing], tuple[str, ...]]:
    missing, usable = [], []
    for name in enabled:
        framework = kueue_integrations.FRAMEWORKS.get(name)
        if framework is None:
            continue  # refused at start-up (scheduler.E006)
        served = True if framework.builtin else crds.get(framework.crd)
        if served:
            usable.append(name)
            continue
        why = (
            "the portal may not read it (the chart's ClusterRole grants get on it)"
            if served is None
            else "it is not installed"
        )
        missing.append(
            Missing(
                "CRD",
                framework.crd,
                f"KUEUE_INTEGRATIONS enables {name}, but the cluster's CRD {framework.crd} "
                f"cannot be found: {why}. Install it (or take {name} out of "
                f"KUEUE_INTEGRATIONS); until then teams are not given {framework.resource}.",
            )
        )
    return missing, tuple(usable)


def _dra_findings(config: dict, dra_models: Sequence[str]) -> list[Missing]:
    """A model served through DRA is counted only where Kueue maps the driver's classes to the
    portal's quota resource; without it its claims are counted by device, not by slices."""
    if not dra_models:
        return []
    mappings = (config.get("resources") or {}).get("deviceClassMappings") or []
    names = {m.get("name") for m in mappings if isinstance(m, Mapping)}
    if QUOTA_RESOURCE in names:
        return []
    return [
        Missing(
            "resources.deviceClassMappings",
            QUOTA_RESOURCE,
            f"GPU_DRA_MODELS serves {', '.join(dra_models)} through DRA, but Kueue's "
            f"Configuration has no deviceClassMappings entry {QUOTA_RESOURCE}, so their grants "
            f"are not charged in multiprocessors and DRA work waits. Add it; {FIX}.",
        )
    ]


def _config_findings(config: dict, enabled: Sequence[str]) -> list[Missing]:
    missing = []
    if config.get("manageJobsWithoutQueueName") is not True:
        missing.append(
            Missing(
                "manageJobsWithoutQueueName",
                "true",
                "Kueue's Configuration lacks manageJobsWithoutQueueName: true, so work created "
                "in a team namespace without a queue label runs beside the queue. Set it; "
                + FIX
                + ".",
            )
        )
    selector = config.get("managedJobsNamespaceSelector")
    want_selector = f'matchLabels {{{QUEUE_ENFORCED_LABEL}: "true"}}'
    if selector is None or not selects(selector, TEAM_NAMESPACE_LABELS):
        what = (
            "has no managedJobsNamespaceSelector (Kueue's default manages every namespace but "
            "its own and kube-system)"
            if selector is None
            else "has a managedJobsNamespaceSelector that does not select team namespaces"
        )
        missing.append(
            Missing(
                "managedJobsNamespaceSelector",
                want_selector,
                f"Kueue's Configuration {what}. Set it to {want_selector}, the label the "
                f"portal puts on team namespaces; {FIX}.",
            )
        )
    frameworks = (config.get("integrations") or {}).get("frameworks") or KUEUE_DEFAULT_FRAMEWORKS
    for name in enabled:
        if name not in frameworks:
            missing.append(
                Missing(
                    "integrations.frameworks",
                    name,
                    f"Kueue's integrations.frameworks lacks {name} (KUEUE_INTEGRATIONS enables "
                    f"it), so such work in a team namespace runs beside the queue. Add it; "
                    f"{FIX}.",
                )
            )
    wait = config.get("waitForPodsReady")
    # v1beta1 had `enable`; v1beta2 waits whenever the section is there
    if not isinstance(wait, Mapping) or wait.get("enable") is False:
        missing.append(
            Missing(
                "waitForPodsReady",
                "KUEUE_PODS_READY_*",
                "Kueue's Configuration has no waitForPodsReady, so a gang may hold GPUs "
                "half-started for Kueue's own default, not the portal's numbers. Set it as "
                f"KUEUE_PODS_READY_* say; {FIX}.",
            )
        )
    return missing


def judge(
    facts: Facts,
    *,
    enabled: Sequence[str],
    namespace: str,
    name: str,
    dra_models: Sequence[str] = (),
) -> Verdict:
    """The verdict on the running Kueue (pure): `enabled`, the integrations the portal enables;
    `namespace`/`name`, where its ConfigMap was read from; `dra_models`, GPU_DRA_MODELS."""
    missing, usable = _crd_findings(enabled, facts.crds)
    where = f"{namespace}/{name}"
    config: object = None
    if facts.config_error:
        problem = f"it cannot be read ({facts.config_error})"
        want = f"get on ConfigMap {where}"
    elif facts.config_map is None:
        problem = "there is no such ConfigMap"
        want = "KUEUE_CONFIG_NAMESPACE, KUEUE_CONFIG_MAP"
    else:
        text = (facts.config_map.get("data") or {}).get(CONFIG_KEY)
        problem = f"it has no key {CONFIG_KEY}"
        want = f"{CONFIG_KEY} in {where}"
        if text is not None:
            try:
                config = yaml.safe_load(text)
            except yaml.YAMLError:
                problem = f"its key {CONFIG_KEY} is not YAML"
            else:
                if not isinstance(config, dict):
                    problem = f"its key {CONFIG_KEY} is not a Configuration"
    if isinstance(config, dict):
        missing += _config_findings(config, enabled) + _dra_findings(config, dra_models)
    else:
        missing.insert(
            0,
            Missing(
                "ConfigMap",
                want,
                f"Kueue's running Configuration is read from ConfigMap {where}, but {problem}: "
                "whether Kueue holds teams' work to the queue is unknown. Set "
                "KUEUE_CONFIG_NAMESPACE and KUEUE_CONFIG_MAP to where Kueue keeps it (the chart "
                "grants get on that one ConfigMap).",
            ),
        )
    return Verdict(tuple(missing), usable)


def remember(verdict: Verdict) -> None:
    cache.set(CACHE_KEY, verdict.as_dict(), timeout=int(CHECK_TTL_S * 4))


def remembered() -> dict | None:
    """The last verdict any process reached (None if none is known): pages, /readyz and
    /metrics read this and never ask the cluster themselves."""
    return cache.get(CACHE_KEY)


def optional_crds(enabled: Iterable[str]) -> tuple[str, ...]:
    """The CRDs to look for: those of the enabled custom-resource integrations."""
    return tuple(f.crd for f in kueue_integrations.optional(enabled))


class KueueSettingsCheck:
    """One gateway's verdict, read at its first use and again after `CHECK_TTL_S`, or at once
    with `fresh` (every cluster-wide reconcile). `read(crds)` returns the `Facts`."""

    def __init__(self, read: Callable[[str, str, tuple[str, ...]], Facts]):
        self._read = read
        self._lock = threading.Lock()
        self._verdict: Verdict | None = None
        self._until = float("-inf")

    def verdict(self, *, fresh: bool = False) -> Verdict:
        with self._lock:
            if fresh or self._verdict is None or time.monotonic() >= self._until:
                enabled = tuple(settings.KUEUE_INTEGRATIONS)
                namespace, name = settings.KUEUE_CONFIG_NAMESPACE, settings.KUEUE_CONFIG_MAP
                facts = self._read(namespace, name, optional_crds(enabled))
                verdict = judge(
                    facts,
                    enabled=enabled,
                    namespace=namespace,
                    name=name,
                    dra_models=settings.GPU_DRA_MODELS,
                )
                if verdict != self._verdict:  # said once per change, not on every reconcile
                    for missing in verdict.missing:
                        log.error("Kueue's settings: %s", missing.detail)
                self._verdict, self._until = verdict, time.monotonic() + CHECK_TTL_S
                remember(verdict)
            return self._verdict
