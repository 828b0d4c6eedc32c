"""The checks of an opened workspace that need no database (pure but for the settings they
read): its name, kind, image, home size and time limit. Each refusal says what to change."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from catalog.run_limits import duration_words
from core.errors import InvalidInput
from core.quantities import parse_quantity
from scheduler.workloads.submit.input import check_image
from tenants.models.tenants import dns_label
from workspaces.manifests import HOMES

MAX_NAME = 30  # ws-<name>-home stays a short name, the run's name within the workloads' 40


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInput("give the workspace a name, e.g. my-notebook", field="name")
    try:
        dns_label(name)
    except ValidationError as exc:
        raise InvalidInput(f"name {name!r}: {exc.messages[0]}", field="name") from None
    if len(name) > MAX_NAME:
        raise InvalidInput(f"name {name!r}: at most {MAX_NAME} characters", field="name")
    return name


def check_kind(kind: Any) -> str:
    if kind not in HOMES:
        raise InvalidInput(f"kind must be one of {sorted(HOMES)}", field="kind")
    return kind


def check_workspace_image(image: Any) -> str:
    """The workloads' allow-list (WORKLOAD_IMAGE_ALLOWLIST), the same rule the cluster's queue
    guard applies to every pod."""
    if not isinstance(image, str):
        raise InvalidInput(
            "give an image reference, e.g. quay.io/jupyter/pytorch-notebook", field="image"
        )
    check_image(image)
    return image


def check_time_limit(hours: Any) -> int:
    """Hours (whole or decimal) within WORKSPACE_MIN_TIME_LIMIT_S..WORKSPACE_MAX_TIME_LIMIT_S;
    returns seconds."""
    low, high = settings.WORKSPACE_MIN_TIME_LIMIT_S, settings.WORKSPACE_MAX_TIME_LIMIT_S
    span = f"between {duration_words(low)} and {duration_words(high)}"
    try:
        seconds = int(float(hours) * 3600)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"time limit: give hours, {span}", field="time_limit_h") from None
    if isinstance(hours, bool) or not low <= seconds <= high:
        raise InvalidInput(
            f"time limit {hours!r} h is out of range: give a time limit {span}",
            field="time_limit_h",
        )
    return seconds


def check_home_size(size: Any) -> str:
    most = settings.WORKSPACE_MAX_HOME_SIZE
    try:
        amount = parse_quantity(size) if isinstance(size, str) and size else None
    except (ValueError, ArithmeticError):
        amount = None
    if amount is None or amount < parse_quantity("1Gi") or amount > parse_quantity(most):
        raise InvalidInput(
            f"home size {size!r}: give a size between 1Gi and {most}, e.g. 10Gi",
            field="home_size",
        )
    return size
