"""Workspaces' settings (workspaces/, docs/workspaces.md) and their culling task
(added to the beat schedule celery_settings.py holds)."""

from .celery_settings import CELERY_BEAT_SCHEDULE
from .environment import env

# Interactive servers on a team's GPUs, reached through an Ingress on WORKSPACE_HOST (default: the
# portal's own host, so the session cookie reaches the auth request) whose auth request goes to
# WORKSPACE_AUTH_BASE_URL (the portal as the ingress controller reaches it; default
# PORTAL_BASE_URL). Culled after WORKSPACE_IDLE_AFTER_S with no activity and GPU use under
# WORKSPACE_IDLE_GPU_PCT, warned WORKSPACE_IDLE_NOTICE_S before.
WORKSPACE_HOST = env("WORKSPACE_HOST", default="")
WORKSPACE_AUTH_BASE_URL = env("WORKSPACE_AUTH_BASE_URL", default="")
WORKSPACE_INGRESS_CLASS = env("WORKSPACE_INGRESS_CLASS", default="nginx")
# The ingress controller's namespace: team namespaces let it reach workspace servers (and only
# their port); empty: no one outside the team's and the platform's namespace can.
WORKSPACE_INGRESS_NAMESPACE = env("WORKSPACE_INGRESS_NAMESPACE", default="ingress-nginx")
WORKSPACE_STORAGE_CLASS = env("WORKSPACE_STORAGE_CLASS", default="")
WORKSPACE_HOME_SIZE = env("WORKSPACE_HOME_SIZE", default="10Gi")
WORKSPACE_MAX_HOME_SIZE = env("WORKSPACE_MAX_HOME_SIZE", default="200Gi")
WORKSPACE_DEFAULT_IMAGE = env(
    "WORKSPACE_DEFAULT_IMAGE", default="quay.io/jupyter/pytorch-notebook:cuda12-latest"
)
WORKSPACE_MIN_TIME_LIMIT_S = env.int("WORKSPACE_MIN_TIME_LIMIT_S", default=900)
WORKSPACE_MAX_TIME_LIMIT_S = env.int("WORKSPACE_MAX_TIME_LIMIT_S", default=7 * 86400)
WORKSPACE_MAX_PER_PERSON = env.int("WORKSPACE_MAX_PER_PERSON", default=2)
WORKSPACE_IDLE_AFTER_S = env.int("WORKSPACE_IDLE_AFTER_S", default=3600)
WORKSPACE_MIN_IDLE_AFTER_S = env.int("WORKSPACE_MIN_IDLE_AFTER_S", default=300)
WORKSPACE_IDLE_NOTICE_S = env.int("WORKSPACE_IDLE_NOTICE_S", default=900)
WORKSPACE_IDLE_GPU_PCT = env.int("WORKSPACE_IDLE_GPU_PCT", default=5)
WORKSPACE_CULL_EVERY_S = env.int("WORKSPACE_CULL_EVERY_S", default=60)
CELERY_BEAT_SCHEDULE["cull-workspaces"] = {
    "task": "scheduler.tasks.cull_workspaces",
    "schedule": float(WORKSPACE_CULL_EVERY_S),
    "options": {"expires": max(WORKSPACE_CULL_EVERY_S - 5, 5)},
}
