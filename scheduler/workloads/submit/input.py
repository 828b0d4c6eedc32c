"""Checks of what a workload submit asks for that need no database: image, command, env,
labels, the autoscaling range, and what the pod asks for besides GPUs (cpu, memory, storage,
shared memory, volumes, Secrets). Each returns the clean value or raises `InvalidInput` with the
field to blame. The spec's parser (`submit.spec.parse_spec`) calls them, each field once.
Names are matched in full (`fullmatch`): a regex's `$` would let a trailing newline through."""

from __future__ import annotations

import posixpath
import re
from decimal import Decimal
from typing import Any

from django.conf import settings

from core.errors import InvalidInput, QuotaExceeded
from core.images import image_allowed_by
from core.quantities import BadQuantity, parse_quantity
from scheduler.cluster.render.labels import CONTAINER_DEFAULTS
from scheduler.cluster.render.queue_guard import NVIDIA_ENV_PREFIX
from scheduler.workloads.kinds.pod_template import SHM_MOUNT_PATH
from scheduler.workloads.kinds.serving import check_requests_per_s
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,200}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
RESERVED_LABEL_PREFIXES = ("gpu-portal", "app.kubernetes.io/", "kubernetes.io/", "k8s.io/")
MAX_BACKOFF_LIMIT = 10
MAX_REPLICAS = 64
MAX_TARGET_LATENCY_MS = 60_000


def check_image(image: str) -> None:
    if not image or len(image) > 300 or any(c.isspace() for c in image):
        raise InvalidInput("give an image reference without spaces", field="image")
    allowed = [entry.strip() for entry in settings.WORKLOAD_IMAGE_ALLOWLIST if entry.strip()]
    if not allowed:
        # Fail closed: a platform that forgot to list its registries runs nothing unvetted.
        raise InvalidInput(
            "no image may run yet: the platform's allow-list (setting WORKLOAD_IMAGE_ALLOWLIST) "
            "is empty; a platform admin must list the registries or repositories workloads may "
            "use, e.g. registry.example.com/team-a",
            field="image",
            code="image_not_allowed",
        )
    if not any(image_allowed_by(image, entry) for entry in allowed):
        raise InvalidInput(
            f"image {image!r} is not on the platform's allow-list (WORKLOAD_IMAGE_ALLOWLIST: "
            f"{', '.join(allowed)}); use an image under one of those registries or repositories, "
            "or ask a platform admin to add yours",
            field="image",
            code="image_not_allowed",
        )


def check_strings(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{name} must be a list of strings", field=name)
    return value


# --- env: plain values and references to Secrets ------------------------------------------------
# Every member of a team reads a workload's plain values (and anyone who may read its pods),
# so secrets come from a Secret in the team's namespace: {"NAME": {"secret": S, "key": K}}.
SECRET_REF_FIELDS = ("secret", "key")
_SECRET_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # DNS-1123 subdomain
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # what a Secret's data may be keyed by
# Name words that say "secret": matched on the name without '_' (PGPASSWORD, WANDB_APIKEY)...
_SECRET_NAME_PARTS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY")
_SECRET_NAME_PAIRS = ("PRIVATE_KEY", "API_KEY")
# ...except TOKEN, a whole word only: TOKENIZERS_PARALLELISM and MAX_TOKENS are settings.
_TOKEN_WORD = re.compile(r"(^|_)TOKEN(_|$)")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Values in a known secret format, whatever the name (gitleaks' common rules, simplified).
_SECRET_FORMATS = (
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}|\bgithub_pat_[A-Za-z0-9_]{22,}"), "a GitHub token"),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), "a GitLab token"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "a Hugging Face token"),
    (
        re.compile(r"\bsk-(proj-)?[A-Za-z0-9_-]{20,}|\b[rs]k_(live|test)_[A-Za-z0-9]{16,}"),
        "an API key",
    ),
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."), "a JSON Web Token"),
    (re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"), "a URL with a password"),
)
_FILE_PATH = re.compile(r"^/\S*$")  # where a secret lives (POSTGRES_PASSWORD_FILE), not one


def is_secret_ref(value: Any) -> bool:
    """A checked env value that reads a Secret (see `check_env`), rather than a plain one."""
    return isinstance(value, dict)


def secret_looking_name(name: str) -> bool:
    """Does the variable's name say it holds a secret (AWS_SECRET_ACCESS_KEY, HF_TOKEN, apiKey)?"""
    words = _CAMEL.sub("_", name).upper()
    joined = words.replace("_", "")
    return (
        any(part in joined for part in _SECRET_NAME_PARTS)
        or any(pair in words for pair in _SECRET_NAME_PAIRS)
        or bool(_TOKEN_WORD.search(words))
    )


def secret_format(value: str) -> str | None:
    """What kind of secret the value looks like (an AWS access key id, a private key), or None."""
    for pattern, kind in _SECRET_FORMATS:
        if pattern.search(value):
            return kind
    return None


def _refuse_plain_secret(name: str, why: str) -> InvalidInput:
    # Never repeat the value: the refusal is shown, logged and may be stored for a replay.
    return InvalidInput(
        f"env {name}: {why}; a secret must not be a plain value, which every member of the team "
        "can read. Put it in a Secret in the team's namespace and refer to it: "
        f'"{name}": {{"secret": "<secret name>", "key": "<key>"}}',
        field="env",
        code="secret_in_env",
    )


def _check_secret_ref(name: str, ref: dict) -> dict[str, str]:
    if set(ref) != set(SECRET_REF_FIELDS):
        raise InvalidInput(
            f"env {name}: a Secret reference has the fields secret and key, e.g. "
            f'{{"secret": "s3-creds", "key": "secret-key"}}; got {sorted(map(str, ref))}',
            field="env",
        )
    secret, key = ref["secret"], ref["key"]
    if not isinstance(secret, str) or not _SECRET_NAME.fullmatch(secret):
        raise InvalidInput(
            f"env {name}: secret {secret!r} is not a Secret name: use at most 253 lower-case "
            "letters, digits, '-' and '.', starting and ending with a letter or digit",
            field="env",
        )
    if not isinstance(key, str) or not _SECRET_KEY.fullmatch(key) or key == "." or key[:2] == "..":
        raise InvalidInput(
            f"env {name}: key {key!r} is not a key of a Secret: use at most 253 letters, "
            "digits, '-', '_' and '.' (not '.', nor starting with '..')",
            field="env",
        )
    return {"secret": secret, "key": key}


def check_env(env: Any) -> dict[str, str | dict[str, str]]:
    """NAME -> a plain string, or {"secret": SECRET, "key": KEY}: the value of that key of that
    Secret in the team's namespace. A plain value that looks like a secret (by its name or its
    format) is refused with code `secret_in_env`: it would be readable by every member."""
    env = env or {}
    if not isinstance(env, dict):
        raise InvalidInput(
            'env must be an object of NAME: "value", or NAME: {"secret": SECRET, "key": KEY} '
            "to read the value from a Secret in the team's namespace",
            field="env",
        )
    out: dict[str, str | dict[str, str]] = {}
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(str(key)):
            raise InvalidInput(f"env {key!r}: use NAME (letters, digits, _) = string", field="env")
        if str(key).startswith(NVIDIA_ENV_PREFIX):
            raise InvalidInput(
                f"env {key}: containers may not set {NVIDIA_ENV_PREFIX}* variables: the GPU "
                "device plugin sets them for the GPUs a pod is given; ask for GPUs by resource",
                field="env",
            )
        if isinstance(value, dict):
            out[key] = _check_secret_ref(key, value)
            continue
        if not isinstance(value, str):
            raise InvalidInput(
                f'env {key}: give a string, or {{"secret": ..., "key": ...}} to read the value '
                "from a Secret in the team's namespace",
                field="env",
            )
        if "\x00" in value:
            raise InvalidInput(f"env {key}: the value must not contain NUL characters", field="env")
        plain_path = bool(_FILE_PATH.fullmatch(value))
        if value and not plain_path and secret_looking_name(key):
            raise _refuse_plain_secret(key, "its name says it holds a secret")
        if kind := secret_format(value):
            raise _refuse_plain_secret(key, f"the value looks like {kind}")
        out[key] = value
    return out


def check_labels(labels: Any) -> dict[str, str]:
    labels = labels or {}
    if not isinstance(labels, dict):
        raise InvalidInput("labels must be an object", field="labels")
    for key, value in labels.items():
        if (
            not isinstance(value, str)
            or not _LABEL_KEY.fullmatch(key)
            or not _LABEL_VALUE.fullmatch(value)
        ):
            raise InvalidInput(f"label {key!r}={value!r} is not a valid label", field="labels")
        if key.startswith(RESERVED_LABEL_PREFIXES):
            raise InvalidInput(f"label {key!r} is reserved for the portal", field="labels")
    return labels


def check_autoscaling(autoscaling: Any, kind: str, replicas: int) -> dict | None:
    """The validated `autoscaling` ask ({min_replicas, max_replicas, target_gpu_util,
    target_latency_ms, target_requests_per_s}), or None when the workload has a fixed size."""
    if autoscaling is None:
        return None
    if not isinstance(autoscaling, dict):
        raise InvalidInput("autoscaling must be an object", field="autoscaling")
    if kind != Workload.Kind.DEPLOYMENT:
        raise InvalidInput("only deployments (inference) autoscale", field="autoscaling")
    unknown = set(autoscaling) - {
        "min_replicas",
        "max_replicas",
        "target_gpu_util",
        "target_latency_ms",
        "target_requests_per_s",
    }
    if unknown:
        raise InvalidInput(f"unknown autoscaling fields {sorted(unknown)}", field="autoscaling")

    def whole(name: str, low: int, high: int, default: int | None = None) -> int | None:
        value = autoscaling.get(name, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"{name} must be a whole number {low}–{high}", field="autoscaling")
        return value

    low = whole("min_replicas", 1, MAX_REPLICAS, default=replicas)
    high = whole("max_replicas", 1, MAX_REPLICAS)
    if low is None or high is None:
        raise InvalidInput("give max_replicas (and min_replicas)", field="autoscaling")
    if replicas not in (DEFAULT_REPLICAS, low):
        raise InvalidInput(
            "with autoscaling, give the size as min_replicas, not replicas", field="replicas"
        )
    if high < low:
        raise InvalidInput(
            f"max_replicas ({high}) is below min_replicas ({low}): raise max_replicas to at "
            f"least {low} or lower min_replicas",
            field="autoscaling",
        )
    gpu_util = whole("target_gpu_util", 1, 100)
    latency_ms = whole("target_latency_ms", 1, MAX_TARGET_LATENCY_MS)
    per_s = check_requests_per_s(autoscaling.get("target_requests_per_s"))
    if gpu_util is None and latency_ms is None and per_s is None:
        raise InvalidInput(
            "give target_gpu_util (%), target_latency_ms and/or target_requests_per_s "
            "(per replica) to scale on",
            field="autoscaling",
        )
    return {
        "min_replicas": low,
        "max_replicas": high,
        "target_gpu_util": gpu_util,
        "target_latency_ms": latency_ms,
        "target_requests_per_s": per_s,
    }


# --- what the pod asks for besides GPUs ---------------------------------------------------------
# field -> (the setting with its most, an example, the least a container runs with, its name)
_MIB = Decimal(1024**2)
QUANTITY_FIELDS: dict[str, tuple[str, str, Decimal, str]] = {
    "cpu": ("WORKLOAD_MAX_CPU", "8 or 500m", Decimal("0.001"), "1m"),
    "memory": ("WORKLOAD_MAX_MEMORY", "64Gi", _MIB, "1Mi"),
    "ephemeral_storage": ("WORKLOAD_MAX_EPHEMERAL_STORAGE", "100Gi", _MIB, "1Mi"),
}
# The namespace-wide line each is counted against (Kueue's ClusterQueue, never borrowed).
NAMESPACE_QUOTAS = {
    "cpu": "TENANT_CPU_QUOTA",
    "memory": "TENANT_MEMORY_QUOTA",
    "ephemeral_storage": "TENANT_EPHEMERAL_STORAGE_QUOTA",
}
# Where a volume may not be mounted: over the image's system directories, the kernel's, or
# where Kubernetes puts its own files (a service account token, /dev/shm).
SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/run/secrets",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run/secrets",
)
_MOUNT_PATH = re.compile(r"^/[A-Za-z0-9._@+=,-]+(/[A-Za-z0-9._@+=,-]+)*$")
MAX_MOUNT_PATH = 256
VOLUME_FIELDS = ("claim", "mount_path", "read_only")
MAX_SECRET_NAMES = 16


def _quantity(value: Any, field: str, example: str) -> tuple[str, Decimal] | None:
    """(the quantity as given, its value), None when not given. A string: the API's field
    reads a JSON number as one (8 -> "8"), the form's are strings."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{field} is a Kubernetes quantity, e.g. {example}", field=field)
    value = value.strip()
    try:
        amount = parse_quantity(value)
    except BadQuantity as exc:
        raise InvalidInput(f"{field} {value!r}: {exc}; e.g. {example}", field=field) from None
    if amount <= 0:
        raise InvalidInput(
            f"{field} must be above zero (leave it out for the namespace's default), "
            f"e.g. {example}",
            field=field,
        )
    return value, amount


def check_quantity(value: Any, field: str) -> str:
    """cpu, memory or ephemeral_storage: "" when not given, else a quantity between the least
    a container runs with and the platform's most (the same as the namespaces' LimitRange)."""
    setting, example, least, least_text = QUANTITY_FIELDS[field]
    given = _quantity(value, field, example)
    if given is None:
        return ""
    text, amount = given
    if amount < least:
        raise InvalidInput(
            f"{field} {text!r} is below the least a container runs with ({least_text}); "
            f"e.g. {example}",
            field=field,
        )
    most = getattr(settings, setting)
    if amount > parse_quantity(most):
        raise InvalidInput(
            f"{field} {text!r} is above the most one workload may ask for ({most}, "
            f"setting {setting}); ask for less, e.g. {example}",
            field=field,
        )
    return text


def check_shm(shm: Any, memory: str) -> str:
    """Shared memory is memory-backed: what a process writes there counts against the
    container's memory, so it may be at most `memory` (or the namespace's default limit)."""
    given = _quantity(shm, "shm", "16Gi")
    if given is None:
        return ""
    text, amount = given
    if amount < _MIB:
        raise InvalidInput(f"shm {text!r} is below 1Mi; e.g. 16Gi", field="shm")
    if memory:
        if amount > parse_quantity(memory):
            raise InvalidInput(
                f"shm {text!r} is above memory {memory!r}: /dev/shm is memory-backed and counts "
                f"against the container's memory; ask for memory of at least {text}",
                field="shm",
            )
        return text
    default = CONTAINER_DEFAULTS["default"]["memory"]
    if amount > parse_quantity(default):
        raise InvalidInput(
            f"shm {text!r} is above the namespace's default memory limit ({default}): /dev/shm "
            f"is memory-backed and counts against the container's memory; give memory too, "
            f"at least {text}",
            field="shm",
        )
    return text


def check_fits_namespace(asked: dict[str, str], pods: int) -> None:
    """Refuse what can never run: more cpu, memory or ephemeral storage over all pods than the
    team's namespace may ever hold (its Kueue line, which is never borrowed)."""
    for field, text in asked.items():
        if not text or field not in NAMESPACE_QUOTAS:
            continue
        setting = NAMESPACE_QUOTAS[field]
        cap = getattr(settings, setting)
        if parse_quantity(text) * pods > parse_quantity(cap):
            each = f"{pods} pods × {text}" if pods > 1 else text
            raise QuotaExceeded(
                f"{field}: {each} is more than a team's namespace ever runs ({cap}, setting "
                f"{setting}); ask for less",
                field=field,
            )


def _check_mount_path(path: Any, number: int) -> str:
    where = f"volume {number}"
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidInput(
            f"{where}: mount_path must be an absolute path, e.g. /data", field="volumes"
        )
    if len(path) > MAX_MOUNT_PATH or not _MOUNT_PATH.fullmatch(path):
        raise InvalidInput(
            f"{where}: mount_path {path!r} must be an absolute path of letters, digits and "
            f"._@+=,- (no '//', no trailing '/', at most {MAX_MOUNT_PATH} characters), e.g. /data",
            field="volumes",
        )
    if posixpath.normpath(path) != path:  # a . or .. component
        raise InvalidInput(f"{where}: mount_path {path!r} has . or .. in it", field="volumes")
    for system in SYSTEM_PATHS:
        if path == system or path.startswith(f"{system}/"):
            shm = " (ask for shared memory with shm instead)" if path == SHM_MOUNT_PATH else ""
            raise InvalidInput(
                f"{where}: {path} is under {system}, which belongs to the system or to "
                f"Kubernetes{shm}; mount it elsewhere, e.g. /data",
                field="volumes",
            )
    return path


def check_volumes(volumes: Any) -> list[dict]:
    """Existing PersistentVolumeClaims of the team's namespace to mount: [{claim, mount_path,
    read_only}] (the portal does not create them; the pod waits until they exist)."""
    if volumes is None:
        return []
    if not isinstance(volumes, list):
        raise InvalidInput(
            'volumes must be a list of {"claim": PVC, "mount_path": "/data"}', field="volumes"
        )
    most = settings.WORKLOAD_MAX_VOLUMES
    if len(volumes) > most:
        raise InvalidInput(
            f"at most {most} volumes (setting WORKLOAD_MAX_VOLUMES); this has {len(volumes)}",
            field="volumes",
        )
    out: list[dict] = []
    for number, volume in enumerate(volumes, 1):
        if not isinstance(volume, dict) or set(volume) - set(VOLUME_FIELDS):
            raise InvalidInput(
                f'volume {number}: give {{"claim": PVC, "mount_path": "/data", "read_only": '
                "false}",
                field="volumes",
            )
        claim = volume.get("claim")
        if not isinstance(claim, str) or not _SECRET_NAME.fullmatch(claim):
            raise InvalidInput(
                f"volume {number}: claim {claim!r} is not a PersistentVolumeClaim name: use at "
                "most 253 lower-case letters, digits, '-' and '.', starting and ending with a "
                "letter or digit",
                field="volumes",
            )
        path = _check_mount_path(volume.get("mount_path"), number)
        read_only = volume.get("read_only", False)
        if not isinstance(read_only, bool):
            raise InvalidInput(f"volume {number}: read_only is true or false", field="volumes")
        for earlier in out:
            if earlier["claim"] == claim:
                raise InvalidInput(f"claim {claim!r} is mounted twice", field="volumes")
            if earlier["mount_path"] == path:
                raise InvalidInput(f"two volumes are mounted at {path}", field="volumes")
        out.append({"claim": claim, "mount_path": path, "read_only": read_only})
    return out


def check_secret_names(names: Any, field: str) -> list[str]:
    """Names of Secrets in the team's namespace (env_from_secrets, image_pull_secrets)."""
    if names is None:
        return []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidInput(f"{field} must be a list of Secret names", field=field)
    if len(names) > MAX_SECRET_NAMES:
        raise InvalidInput(f"{field}: at most {MAX_SECRET_NAMES} Secrets", field=field)
    for name in names:
        if not _SECRET_NAME.fullmatch(name):
            raise InvalidInput(
                f"{field}: {name!r} is not a Secret name: use at most 253 lower-case letters, "
                "digits, '-' and '.', starting and ending with a letter or digit",
                field=field,
            )
    if len(set(names)) != len(names):
        raise InvalidInput(f"{field}: a Secret is named twice", field=field)
    return list(names)
