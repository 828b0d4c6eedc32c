import hashlib
import os

from catalog import dra_devices, kueue_integrations

from .base import *  # noqa: F403
from .base import BASE_DIR, env

_CHECKOUT = hashlib.sha256(str(BASE_DIR.resolve()).encode()).hexdigest()[:8]
# An xdist worker of the database lane (scripts/test.sh) keys its cache apart from the other.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user factories
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# The tests' own broker database, away from a portal that may run on the same Redis.
CELERY_BROKER_URL = env("TEST_CELERY_BROKER_URL", default="redis://127.0.0.1:6379/15")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
LOG_LEVEL = "WARNING"
LOGGING = {**LOGGING, "root": {"handlers": ["console"], "level": "WARNING"}}  # noqa: F405
RECONCILE_ON_COMMIT = False  # tests that need it turn it on
SUBMIT_CHECKS_CLAIMS = False  # reads the cluster: the cluster tests that need it turn it on
# A sync run lasts its watches' window: the deployed default (the beat's period) would hold each
# test that runs one for 10 s. The scale bench runs the deployed timing (bench/scale_bench.py).
SYNC_WORKLOADS_WATCH_S = 3
# The suite shares the local cluster with a developer's portal: its own label and names.
# (Overridable so that two suites can run side by side against one cluster.)
PORTAL_INSTANCE = env("TEST_PORTAL_INSTANCE", default="test")
TENANT_NAMESPACE_PREFIX = env("TEST_NAMESPACE_PREFIX", default="test-")
# The tests' own cache database, and keys prefixed per suite (tests/conftest.py clears them
# before each test): throttle counts and lockouts never leak between tests or suites.
CACHES = {
    "default": {
        **CACHES["default"],  # noqa: F405
        "LOCATION": env("TEST_CACHE_URL", default="redis://127.0.0.1:6379/14"),
        # Per checkout and worker, as the test database is (root conftest.py): a suite in
        # another worktree, CI clone or lane clears only its own keys, never this one's lockouts.
        "KEY_PREFIX": f"test-{PORTAL_INSTANCE}-{_CHECKOUT}{_WORKER}",
    }
}
WORKLOAD_IMAGE_ALLOWLIST = ["*"]  # tests that need an allow-list set one
WORKER_METRICS_PORT = 0  # the tests' workers serve no metrics; tests that need it set a port

# The local cluster runs JobSet's controller: its Kueue queues JobSets, so team Roles may make them.
KUEUE_INTEGRATIONS = env.list("KUEUE_INTEGRATIONS", default=list(kueue_integrations.LOCAL_CLUSTER))
# The local cluster serves its DRA node's model so (localcluster/dra_node.py).
GPU_DRA_MODELS = env.list("GPU_DRA_MODELS", default=list(dra_devices.LOCAL_CLUSTER_MODELS))
# Workspaces on a site of their own (workspaces/sites.py), as production must.
WORKSPACE_DOMAIN = "ws.gpu-portal-workspaces.test"
WORKSPACE_PROXY_TOKEN = "test-proxy-token"  # noqa: S105 - the tests' own
