"""Hooks: a question a lower layer asks that only a higher layer can answer.

A hook is declared once with its signature, in the room that asks (`tenants/hooks.py`,
`catalog/hooks.py`), filled once at start-up by `portal/wiring.py` (from
`PortalConfig.ready`), and called by name where it is needed, so the call site says what runs
there: `hooks.workload_admission(tenant)`.
`manage.py check` fails (core.E001) while a declared hook is unfilled, and calling one raises
`ImproperlyConfigured`: a wiring that goes missing is an error at start-up, never a silent skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

P = ParamSpec("P")
R = TypeVar("R")

WIRING = "portal/wiring.py"
_declared: list[Hook[Any, Any]] = []


class Hook(Generic[P, R]):
    """One answer, filled by one function; calling the hook calls it."""

    def __init__(self, name: str, answers: str, *, declare: bool = True) -> None:
        self.name = name
        self.answers = answers
        self._impl: Callable[P, R] | None = None
        if declare:  # only a test's throwaway hook stays out of the start-up check
            _declared.append(self)

    def fill(self, impl: Callable[P, R]) -> None:
        """Filling again replaces the answer (the app registry may call ready() twice)."""
        self._impl = impl

    @property
    def filled_by(self) -> str | None:
        if self._impl is None:
            return None
        return f"{self._impl.__module__}.{self._impl.__qualname__}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._impl is None:
            raise ImproperlyConfigured(
                f"hook {self.name} is not filled ({self.answers}): fill it in {WIRING}"
            )
        return self._impl(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Hook {self.name}: {self.filled_by or 'unfilled'}>"


def declared_hooks() -> list[Hook[Any, Any]]:
    return list(_declared)


def unfilled_errors(hooks: Iterable[Hook[Any, Any]]) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"hook {hook.name} is not filled: {hook.answers}",
            hint=f"fill it in {WIRING} (run from PortalConfig.ready)",
            id="core.E001",
        )
        for hook in hooks
        if hook.filled_by is None
    ]


@checks.register()
def check_hooks_filled(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    return unfilled_errors(declared_hooks())
