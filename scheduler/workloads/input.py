"""Checks of what a workload submit asks for that need no database: image, command, env,
labels and the autoscaling range. Each returns the clean value or raises `InvalidInput` with the
field to blame. Admission (`scheduler.workloads.submit_workload`) calls them first."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from django.conf import settings

from core.errors import InvalidInput
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
    allowed = list(settings.WORKLOAD_IMAGE_ALLOWLIST)
    if allowed and not any(fnmatch.fnmatchcase(image, pattern) for pattern in allowed):
        raise InvalidInput(
            f"image {image!r} is not on the platform's allow-list ({', '.join(allowed)})",
            field="image",
            code="image_not_allowed",
        )


def check_strings(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{name} must be a list of strings", field=name)
    return value


def check_env(env: Any) -> dict[str, str]:
    env = env or {}
    if not isinstance(env, dict):
        raise InvalidInput("env must be an object of NAME: value", field="env")
    for key, value in env.items():
        if not _ENV_NAME.match(str(key)) or not isinstance(value, str):
            raise InvalidInput(f"env {key!r}: use NAME (letters, digits, _) = string", field="env")
    return env


def check_labels(labels: Any) -> dict[str, str]:
    labels = labels or {}
    if not isinstance(labels, dict):
        raise InvalidInput("labels must be an object", field="labels")
    for key, value in labels.items():
        if not isinstance(value, str) or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise InvalidInput(f"label {key!r}={value!r} is not a valid label", field="labels")
        if key.startswith(RESERVED_LABEL_PREFIXES):
            raise InvalidInput(f"label {key!r} is reserved for the portal", field="labels")
    return labels


def check_autoscaling(autoscaling: Any, kind: str, replicas: int) -> dict | None:
    """The validated `autoscaling` ask ({min_replicas, max_replicas, target_gpu_util,
    target_latency_ms}), or None when the workload has a fixed size."""
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
            f"max_replicas ({high}) is below min_replicas ({low})", field="autoscaling"
        )
    gpu_util = whole("target_gpu_util", 1, 100)
    latency_ms = whole("target_latency_ms", 1, MAX_TARGET_LATENCY_MS)
    if gpu_util is None and latency_ms is None:
        raise InvalidInput(
            "give target_gpu_util (%) and/or target_latency_ms to scale on", field="autoscaling"
        )
    return {
        "min_replicas": low,
        "max_replicas": high,
        "target_gpu_util": gpu_util,
        "target_latency_ms": latency_ms,
    }
