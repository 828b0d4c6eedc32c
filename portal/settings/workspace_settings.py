"""Workspaces' settings (workspaces/, docs/workspaces.md) and their culling task
(added to the beat schedule celery_settings.py holds)."""

from .celery_settings import CELERY_BEAT_SCHEDULE
from .environment import env

# Interactive servers on a team's GPUs, each on its own host `w<id>.<WORKSPACE_DOMAIN>`: a
# registrable domain apart from the portal's, so the portal's cookies never reach a workspace and
# a workspace's scripts never run in the portal's origin (a system check refuses a domain that
# shares the portal's cookies, unless WORKSPACE_ALLOW_SAME_SITE, for development only). The
# portal's auth proxy (workspaces/proxy/) serves that domain: the portal hands the browser a
# one-time ticket (WORKSPACE_TICKET_MAX_AGE_S) that the proxy exchanges, over the cluster's
# network and with WORKSPACE_PROXY_TOKEN, for a host-only workspace cookie that lasts
# WORKSPACE_SESSION_MAX_AGE_S; the proxy asks the portal again at least every
# WORKSPACE_PROXY_RECHECK_S. Culled after WORKSPACE_IDLE_AFTER_S with no activity and GPU use
# under WORKSPACE_IDLE_GPU_PCT, warned WORKSPACE_IDLE_NOTICE_S before.
WORKSPACE_DOMAIN = env("WORKSPACE_DOMAIN", default="")
WORKSPACE_ALLOW_SAME_SITE = env.bool("WORKSPACE_ALLOW_SAME_SITE", default=False)
WORKSPACE_SCHEME = env("WORKSPACE_SCHEME", default="https")
WORKSPACE_PROXY_TOKEN = env("WORKSPACE_PROXY_TOKEN", default="")
WORKSPACE_TICKET_MAX_AGE_S = env.int("WORKSPACE_TICKET_MAX_AGE_S", default=60)
WORKSPACE_SESSION_MAX_AGE_S = env.int("WORKSPACE_SESSION_MAX_AGE_S", default=8 * 3600)
# Where the proxy reaches a workspace's server ({service}, {namespace}, {port}).
WORKSPACE_UPSTREAM = env("WORKSPACE_UPSTREAM", default="{service}.{namespace}.svc:{port}")
# Where the platform's gateway lives, when not the platform namespace: team namespaces let it
# reach workspace servers (and only their port); empty: the platform namespace (the proxy's).
WORKSPACE_INGRESS_NAMESPACE = env("WORKSPACE_INGRESS_NAMESPACE", default="")
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
# Where the platform cannot give workspaces a site of their own: the portal's cookies become
# __Host- cookies (host-only, Secure, Path=/), which no sibling or child host can set or read.
PORTAL_HOST_COOKIES = env.bool("PORTAL_HOST_COOKIES", default=False)
if PORTAL_HOST_COOKIES:
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"
