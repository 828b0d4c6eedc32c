"""The catalog's one question for a higher layer (core/hooks.py says how a hook works; it is
filled in portal/wiring.py, and `manage.py check` fails while it is not)."""

from __future__ import annotations

from core.hooks import Hook

# After commit, when a policy shaping every tenant's objects changed (a pool's borrowing or
# lending): every team's ClusterQueue follows it. The cluster layer queues the reconcile.
fleet_policy_changed: Hook[[], None] = Hook(
    "fleet_policy_changed", "every tenant's cluster objects may have to change: reconcile all"
)
