"""Settings shared by every mode; every value that differs between machines comes from the
environment (docs/configuration.md lists them all)."""

from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from .celery_settings import *  # noqa: F403 - the Celery settings (broker, routes, beat)
from .celery_settings import CELERY_BEAT_SCHEDULE  # each app's periodic tasks are added below
from .environment import BASE_DIR, env
from .gpu_queue_settings import *  # noqa: F403 - Kueue, the quota unit, DRA
from .metering_settings import *  # noqa: F403 - metering, GPU health signals, billing, idle
from .serving_settings import *  # noqa: F403 - the metrics inference services autoscale on
from .workspace_settings import *  # noqa: F403 - workspaces and their culling

SECRET_KEY = env("SECRET_KEY", default="dev-only-not-secret-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "core",
    "catalog",
    "portal",
    "tenants",
    "scheduler",
    "workspaces",
    "metering",
]

MIDDLEWARE = [
    "portal.metrics.middleware.RequestMetricsMiddleware",  # first: times everything below
    "portal.middleware.RequestIdMiddleware",
    # Probes and /metrics answer whatever the Host (the pod's IP): before anything checks it.
    "portal.middleware.HostFreeProbesMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # turns a locked-out sign-in into its answer
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.portal",
            ],
        },
    },
]

DATABASES = {
    "default": env.db(
        "DATABASE_URL", default="postgres://gpu_portal:gpu_portal@127.0.0.1:5432/gpu_portal"
    ),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Single sign-on (OpenID Connect): off unless OIDC_RP_CLIENT_ID is set (docs/configuration.md).
OIDC_ENABLED = bool(env("OIDC_RP_CLIENT_ID", default=""))
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: a locked-out sign-in goes no further
    "django.contrib.auth.backends.ModelBackend",
]
if OIDC_ENABLED:
    INSTALLED_APPS.append("mozilla_django_oidc")
    AUTHENTICATION_BACKENDS.insert(1, "portal.oidc.PortalOIDCBackend")
    OIDC_RP_CLIENT_ID = env("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = env("OIDC_RP_CLIENT_SECRET", default="")
    OIDC_RP_SIGN_ALGO = env("OIDC_RP_SIGN_ALGO", default="RS256")
    OIDC_OP_AUTHORIZATION_ENDPOINT = env("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT = env("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = env("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = env("OIDC_OP_JWKS_ENDPOINT", default="")
    OIDC_RP_SCOPES = env("OIDC_RP_SCOPES", default="openid email profile")
    OIDC_USERNAME_CLAIM = env("OIDC_USERNAME_CLAIM", default="preferred_username")
    # Accounts are bound to the provider's (issuer, sub), never matched by name or e-mail.
    _op = urlsplit(OIDC_OP_AUTHORIZATION_ENDPOINT)
    OIDC_OP_ISSUER = env("OIDC_OP_ISSUER", default=f"{_op.scheme}://{_op.netloc}")
    LOGIN_REDIRECT_URL_FAILURE = "login"  # where a refused sign-in's message is shown
# Teams and roles from the provider's groups, applied at every single sign-on (tenants/
# group_mapping.py): off while OIDC_GROUPS_CLAIM is empty. Add "groups" to OIDC_RP_SCOPES where
# the provider needs it asked for (Dex does).
OIDC_GROUPS_CLAIM = env("OIDC_GROUPS_CLAIM", default="")
OIDC_GROUP_MAP = env.json("OIDC_GROUP_MAP", default={})  # {"group": "tenant:role" or [...]}
OIDC_GROUP_TENANT_PATTERN = env("OIDC_GROUP_TENANT_PATTERN", default="")
OIDC_PLATFORM_ADMIN_GROUPS = env.list("OIDC_PLATFORM_ADMIN_GROUPS", default=[])
# Marks the platform admins the provider made, so only those are unmade when it stops saying so.
OIDC_PLATFORM_ADMIN_MARKER_GROUP = "platform-admins-from-sso"
# Sign-in lockout (django-axes): AXES_FAILURE_LIMIT wrong passwords for one username from one
# address lock that pair out for the cool-off; counted in the shared cache, so in every worker.
INSTALLED_APPS.append("axes")
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_CACHE = "default"
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # a guesser cannot lock the owner out
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.signin.locked_out"
AXES_CLIENT_IP_CALLABLE = "portal.signin.client_ip"
AXES_WHITELIST_CALLABLE = "portal.signin.not_a_password_sign_in"  # single sign-on: no guessing
AXES_ENABLE_ADMIN = False  # attempts live in the cache, not in the tables its admin would show
AXES_VERBOSE = False  # no start-up banner on every command; lockouts are still logged
# Reverse proxies in front of the portal that append to X-Forwarded-For; 0: use the peer address.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
# One cache for every process: API throttling and sign-in lockouts must not be per worker.
CACHES = {
    "default": {
        "BACKEND": "portal.cache.PortalRedisCache",  # Django's, one Redis client per pool
        "LOCATION": env("CACHE_URL", default="redis://127.0.0.1:6379/1"),
        "KEY_PREFIX": env("CACHE_KEY_PREFIX", default="gpu-portal"),
    }
}
SESSION_ENGINE = env("SESSION_ENGINE", default="django.contrib.sessions.backends.db")
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "landing"  # the approval queue for admins when asks wait, else home
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".local" / "static"
STATICFILES_DIRS = [
    BASE_DIR / "portal" / "static",
    # From the npm registry at setup time (package.json), never committed, served by the portal.
    ("vendor/htmx", BASE_DIR / "node_modules" / "htmx.org" / "dist"),
    ("vendor/chartjs", BASE_DIR / "node_modules" / "chart.js" / "dist"),
]

# Content-Security-Policy (django-csp): scripts and stylesheets only from the portal's own static
# files; no template has an inline script or event handler (tests/portal/test_security.py scans
# them). `style-src-attr` lets style="" attributes through (bar widths and tenant colours computed
# per row) and nothing else inline: no <style> element, no injected stylesheet.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'self'"],
    }
}

EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", default=10.0)  # seconds per SMTP wait: never hang
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="gpu-portal@localhost")
# Where a person refused by the portal reaches the platform team (issue 49, 8): a mailto: or an
# https: link (a ticket queue, a chat channel), shown wherever a page says "ask the platform team".
PLATFORM_CONTACT = env("PLATFORM_CONTACT", default="mailto:gpu-platform@localhost")

# --- Portal -------------------------------------------------------------------------------
PLATFORM_ADMIN_GROUP = "platform-admins"
GRANT_EXPIRY_WARNING_HOURS = env.int("GRANT_EXPIRY_WARNING_HOURS", default=72)
# Notifications (tenants/notifications, docs/configuration.md): personal e-mail to the people an
# event concerns, retries with doubling backoff, the key that encrypts webhook secrets.
NOTIFY_PERSONAL_EMAIL = env.bool("NOTIFY_PERSONAL_EMAIL", default=True)
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=8)
NOTIFY_RETRY_BASE_S = env.float("NOTIFY_RETRY_BASE_S", default=15.0)
NOTIFY_RETRY_MAX_S = env.float("NOTIFY_RETRY_MAX_S", default=3600.0)
NOTIFY_HTTP_TIMEOUT_S = env.float("NOTIFY_HTTP_TIMEOUT_S", default=10.0)
NOTIFY_WEBHOOK_ALLOW_HTTP = env.bool("NOTIFY_WEBHOOK_ALLOW_HTTP", default=False)
# Webhooks to addresses inside the network (private, loopback, link-local): off, so a team's URL
# cannot reach the portal's own services.
NOTIFY_WEBHOOK_ALLOW_PRIVATE = env.bool("NOTIFY_WEBHOOK_ALLOW_PRIVATE", default=False)
NOTIFICATION_SECRET_KEY = env("NOTIFICATION_SECRET_KEY", default="")  # empty: from SECRET_KEY
# GPU-equivalents a tenant without a ceiling of its own may hold in grants (one 8-GPU node):
# no tenant holds without bound, however many asks the auto-approval lets through.
TENANT_DEFAULT_GPU_CEILING = Decimal(env("TENANT_DEFAULT_GPU_CEILING", default="8"))
PORTAL_BASE_URL = env("PORTAL_BASE_URL", default="http://127.0.0.1:8000")

# --- Logging: one JSON object per line, with the request id --------------------------------
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.logging.RequestIdFilter"}},
    "formatters": {"json": {"()": "core.logging.JsonFormatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": "json",
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}, "kubernetes": {"level": "WARNING"}},
}
# Enqueue a reconcile of the tenant after each commit that changes its desired state.
RECONCILE_ON_COMMIT = env.bool("RECONCILE_ON_COMMIT", default=True)
# Tenants a full reconcile converges at once (each tenant's objects in order on one thread).
RECONCILE_APPLY_THREADS = env.int("RECONCILE_APPLY_THREADS", default=4)
# A submit that mounts a volume claim the team's namespace lacks is refused (one GET a claim).
SUBMIT_CHECKS_CLAIMS = env.bool("SUBMIT_CHECKS_CLAIMS", default=True)
# The mig-parted config (what the GPU operator's MIG manager reads) whose names nodes carry.
MIG_PARTED_CONFIG = env(
    "MIG_PARTED_CONFIG",
    default=str(BASE_DIR / "catalog" / "data" / "mig-parted-config.yaml"),
)
GPU_OPERATOR_NAMESPACE = env("GPU_OPERATOR_NAMESPACE", default="gpu-operator")
# A MIG rollout takes one node per task: how long to wait for a node's MIG manager, and for
# its GPU pods to leave (PodDisruptionBudgets are honoured) before the rollout stops there.
MIG_NODE_TIMEOUT_S = env.float("MIG_NODE_TIMEOUT_S", default=60.0)
MIG_DRAIN_TIMEOUT_S = env.float("MIG_DRAIN_TIMEOUT_S", default=120.0)
# A rollout step holds a PostgreSQL lease (an advisory lock on its worker's session) while it
# runs, so a worker that dies frees it at once. A rollout no worker holds is resumed once it has
# been silent this long (the hand-over between two steps' tasks), by a check this often.
MIG_ROLLOUT_HANDOVER_S = env.float("MIG_ROLLOUT_HANDOVER_S", default=10.0)
MIG_ROLLOUT_RESUME_EVERY_S = env.float("MIG_ROLLOUT_RESUME_EVERY_S", default=10.0)
KUBECONFIG = env("KUBECONFIG", default=str(BASE_DIR / ".local" / "kubeconfig"))

# --- What the reconciler renders for each tenant ---------------------------------------------
PORTAL_INSTANCE = env("PORTAL_INSTANCE", default="default")
TENANT_NAMESPACE_PREFIX = env("TENANT_NAMESPACE_PREFIX", default="tenant-")
PLATFORM_NAMESPACE = env("PLATFORM_NAMESPACE", default="gpu-portal-system")
# The portal's web pods there and their port: what team pods may reach in that namespace (the
# Helm chart sets both to its own labels).
PLATFORM_WEB_POD_LABELS = env.dict(
    "PLATFORM_WEB_POD_LABELS",
    default={"app.kubernetes.io/name": "gpu-portal", "app.kubernetes.io/component": "web"},
)
PLATFORM_WEB_PORT = env.int("PLATFORM_WEB_PORT", default=8000)
TENANT_CPU_QUOTA = env("TENANT_CPU_QUOTA", default="64")
TENANT_MEMORY_QUOTA = env("TENANT_MEMORY_QUOTA", default="256Gi")
TENANT_POD_QUOTA = env.int("TENANT_POD_QUOTA", default=200)
# Kueue's line for ephemeral storage in each team's ClusterQueue (it admits no pod asking for a
# resource its queue does not list).
TENANT_EPHEMERAL_STORAGE_QUOTA = env("TENANT_EPHEMERAL_STORAGE_QUOTA", default="4Ti")
# PersistentVolumeClaims per tenant namespace: how many, and the storage they request in all.
TENANT_PVC_QUOTA = env.int("TENANT_PVC_QUOTA", default=50)
TENANT_STORAGE_QUOTA = env("TENANT_STORAGE_QUOTA", default="10Ti")
# The most one workload's container may ask for (Kubernetes quantities). The portal refuses
# more, and each team namespace's LimitRange has the same maxima (ephemeral storage too), so
# the portal and the cluster agree (checked at start-up: scheduler.E004).
WORKLOAD_MAX_CPU = env("WORKLOAD_MAX_CPU", default="64")
WORKLOAD_MAX_MEMORY = env("WORKLOAD_MAX_MEMORY", default="256Gi")
WORKLOAD_MAX_EPHEMERAL_STORAGE = env("WORKLOAD_MAX_EPHEMERAL_STORAGE", default="1Ti")
WORKLOAD_MAX_VOLUMES = env.int("WORKLOAD_MAX_VOLUMES", default=8)
KUBE_USER_PREFIX = env("KUBE_USER_PREFIX", default="")  # e.g. "oidc:" to match the API server
# The identity provider's groups that OIDC_GROUP_MAP names are bound too, prefixed as the API
# server's --oidc-groups-prefix (e.g. "oidc:").
KUBE_GROUP_PREFIX = env("KUBE_GROUP_PREFIX", default="")
# Team members may exec into, attach to and port-forward their own pods.
TENANT_POD_EXEC = env.bool("TENANT_POD_EXEC", default=True)
# Egress of team pods: DNS, their own and the platform namespace always; these CIDRs too, minus
# the denied ones wherever an allowed CIDR covers them (cloud metadata, and add the API server's
# addresses, e.g. the endpoints of the `kubernetes` Service, when allowing wide ranges).
TENANT_EGRESS_ALLOWED_CIDRS = env.list("TENANT_EGRESS_ALLOWED_CIDRS", default=[])
TENANT_EGRESS_DENIED_CIDRS = env.list(
    "TENANT_EGRESS_DENIED_CIDRS", default=["169.254.169.254/32", "fd00:ec2::254/128"]
)
CLUSTER_DNS_NAMESPACE = env("CLUSTER_DNS_NAMESPACE", default="kube-system")
CLUSTER_DNS_POD_LABELS = env.dict("CLUSTER_DNS_POD_LABELS", default={"k8s-app": "kube-dns"})
# Who may lift Kueue's gate or unsuspend a Job in a team namespace (the queue guard policy):
# Kueue's own identity. Cluster admins (system:masters) are trusted anyway.
KUEUE_USERNAMES = env.list(
    "KUEUE_USERNAMES", default=["system:serviceaccount:kueue-system:kueue-controller-manager"]
)
# Kueue ResourceFlavors add these tolerations to admitted GPU pods, and the portal's workload
# pods carry them: GPU nodes are commonly tainted `nvidia.com/gpu:NoSchedule` so that nothing
# else lands on them. JSON list, checked at start-up (scheduler.E002).
GPU_NODE_TOLERATIONS = env.json(
    "GPU_NODE_TOLERATIONS",
    default=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
)
# GPU feature discovery's `nvidia.com/gpu.product` per GPU model where this platform's nodes
# differ from the catalog's (e.g. {"H100-80GB": "NVIDIA-H100-PCIe"}); JSON object, keys are
# catalog models or their slugs (checked at start-up: scheduler.E003).
GPU_PRODUCT_LABELS = env.json("GPU_PRODUCT_LABELS", default={})
# The data centre's network levels a gang may ask to share ("rack-required"), widest first, as
# name=node label; the platform team names its nodes' keys (e.g. a cloud's topology-block and
# topology-rack labels). The default is the local fleet's (localcluster/fleet.yaml).
GPU_TOPOLOGY_LEVELS = env.dict(
    "GPU_TOPOLOGY_LEVELS",
    default={
        "block": "topology.gpu-portal.local/block",
        "rack": "topology.gpu-portal.local/rack",
    },
)

# --- REST API (issue 5) ---------------------------------------------------------------------
INSTALLED_APPS += ["drf_spectacular_sidecar"]  # Swagger UI assets served locally, no CDN
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api.authentication.BearerTokenAuthentication",  # first: 401 says "Bearer"
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.api.permissions.TokenScopePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        "core.api.filters.PortalFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    # DRF's, refusing too-deep JSON and text PostgreSQL cannot store (core/api/parsers.py)
    "DEFAULT_PARSER_CLASSES": [
        "core.api.parsers.PortalJSONParser",
        "core.api.parsers.PortalFormParser",
        "core.api.parsers.PortalMultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.PortalPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "core.api.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "core.api.exceptions.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["tenants.api.throttling.PerTokenThrottle"],
    "DEFAULT_THROTTLE_RATES": {"per_token": env("API_THROTTLE_RATE", default="600/min")},
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
# Seconds an API token's row is reused from the cache (tenants/services/tokens.py): a
# revocation through the portal takes effect at once; a deactivated user's tokens within this.
API_TOKEN_CACHE_SECONDS = env.int("API_TOKEN_CACHE_SECONDS", default=10)
# The longest an API token lives: a new one without an expiry gets this one, a longer one is
# refused, and a token made before this rule is given one (with notice) by a daily task.
API_TOKEN_MAX_DAYS = env.int("API_TOKEN_MAX_DAYS", default=365)
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": (
        "Ask for GPU capacity, submit workloads and follow them. Authenticate with a browser "
        "session or `Authorization: Bearer <token>`. Creating POSTs accept an `Idempotency-Key` "
        "header. Errors are JSON `{code, detail, errors}`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "CapacityRequestStateEnum": "tenants.models.CapacityRequest.State",
        "QuotaGrantStateEnum": "tenants.models.QuotaGrant.State",
        "WorkloadStateEnum": "scheduler.workloads.models.Workload.State",
        "WorkloadKindEnum": "scheduler.workloads.models.Workload.Kind",
        "ResourceClassKindEnum": "catalog.models.ResourceClass.Kind",
        "PriorityClassEnum": "tenants.models.priority_classes.PRIORITY_CLASSES",
        "NotificationChannelKindEnum": "tenants.models.NotificationChannel.Kind",
    },
}
# Registries or repository prefixes workloads may pull from ("registry.example.com",
# "docker.io/pytorch"; "*": any). Empty refuses every image: production fails closed.
WORKLOAD_IMAGE_ALLOWLIST = env.list("WORKLOAD_IMAGE_ALLOWLIST", default=[])
# RuntimeClasses a team's pods may name (e.g. "gvisor"); empty: none. The NVIDIA runtime class
# is never needed for GPUs here: the device plugin hands a pod the GPUs it asks for.
WORKLOAD_RUNTIME_CLASSES = env.list("WORKLOAD_RUNTIME_CLASSES", default=[])
IDEMPOTENCY_KEY_TTL_HOURS = env.int("IDEMPOTENCY_KEY_TTL_HOURS", default=24)
# Records past their TTL replay nothing; beat deletes them (core.tasks).
CELERY_BEAT_SCHEDULE["purge-idempotency-records"] = {
    "task": "core.tasks.purge_idempotency_records",
    "schedule": env.float("IDEMPOTENCY_PURGE_EVERY_S", default=3600.0),
    "options": {"expires": 3000},
}
CELERY_BEAT_SCHEDULE["sync-queues"] = {
    "task": "scheduler.tasks.sync_queues",
    "schedule": env.float("SYNC_QUEUES_EVERY_S", default=15.0),
    "options": {"expires": 14},
}
# A team running above its grant + borrowing (a grant ended under running work) has its
# lowest-priority, newest work stopped after this long; < 0 turns the policy off.
OVER_QUOTA_GRACE_S = env.int("OVER_QUOTA_GRACE_S", default=900)
CELERY_BEAT_SCHEDULE["stop-work-over-quota"] = {
    "task": "scheduler.tasks.stop_work_over_quota",
    "schedule": env.float("OVER_QUOTA_EVERY_S", default=60.0),
    "options": {"expires": 55},
}
# Lenders take borrowed units back once the borrower has run its pool's reclaim_grace_s
# (scheduler/workloads/queue/reclaim.py); Kueue does that at once where no pool has a grace.
CELERY_BEAT_SCHEDULE["reclaim-borrowed-units"] = {
    "task": "scheduler.tasks.reclaim_borrowed_units",
    "schedule": env.float("RECLAIM_EVERY_S", default=30.0),
    "options": {"expires": 25},
}
CELERY_BEAT_SCHEDULE["delete-leftover-workloads"] = {
    "task": "scheduler.tasks.delete_leftover_workloads",
    "schedule": env.float("DELETE_LEFTOVERS_EVERY_S", default=60.0),
    "options": {"expires": 55},
}
# Elastic layouts (scheduler/mig/reshaping.py): idle GPUs re-shaped for what waits for a
# shape, per GPU model unless a model's ElasticLayout row says otherwise.
ELASTIC_LAYOUTS_ON = env.bool("ELASTIC_LAYOUTS_ON", default=True)
ELASTIC_LAYOUTS_MIN_WAIT_S = env.int("ELASTIC_LAYOUTS_MIN_WAIT_S", default=600)
ELASTIC_LAYOUTS_MAX_GPUS_PER_HOUR = env.int("ELASTIC_LAYOUTS_MAX_GPUS_PER_HOUR", default=4)
CELERY_BEAT_SCHEDULE["follow-queue-layouts"] = {
    "task": "scheduler.tasks.follow_queue_layouts",
    "schedule": env.float("ELASTIC_LAYOUTS_EVERY_S", default=60.0),
    "options": {"expires": 55},
}
CELERY_BEAT_SCHEDULE["resume-stuck-rollouts"] = {
    "task": "scheduler.tasks.resume_stuck_rollouts",
    "schedule": MIG_ROLLOUT_RESUME_EVERY_S,
    "options": {"expires": max(1.0, MIG_ROLLOUT_RESUME_EVERY_S - 1)},
}
SYNC_WORKLOADS_EVERY_S = env.float("SYNC_WORKLOADS_EVERY_S", default=10.0)
CELERY_BEAT_SCHEDULE["sync-workloads"] = {
    "task": "scheduler.tasks.sync_workloads",
    "schedule": SYNC_WORKLOADS_EVERY_S,
    # a run lasts its period (SYNC_WORKLOADS_WATCH_S): the message sent as it watched is the
    # next run's, so it lives until the next one is sent, whatever the period
    "options": {"expires": max(1.0, SYNC_WORKLOADS_EVERY_S - 1)},
}
# The sync reads what changed since its last run (watches); every so often it reads every live
# workload again (level-triggered), which repairs whatever a watch missed.
SYNC_WORKLOADS_FULL_EVERY_S = env.float("SYNC_WORKLOADS_FULL_EVERY_S", default=300.0)
# How long each watch stays open (in parallel). By default as long as the period: on the sync's
# own worker (the `follow` queue) one run's watches open as the last one's close, so a change
# waits for no run to begin. The API server bookmarks a quiet watch 2 s before its end, so below
# 3 s a quiet collection's cursor ages until it expires.
SYNC_WORKLOADS_WATCH_S = env.int(
    "SYNC_WORKLOADS_WATCH_S", default=max(3, int(SYNC_WORKLOADS_EVERY_S))
)
# Within a run, changes are synced in batches as they arrive: after the first change, this long
# for those that come with it (a run reads a namespace once, then follows it from its watches).
SYNC_WORKLOADS_BATCH_S = env.float("SYNC_WORKLOADS_BATCH_S", default=1.0)
# A run that reads at least this many namespaces (and a quarter of those with live work) reads
# the cluster whole: a few lists in all instead of five a namespace.
SYNC_WORKLOADS_WIDE_FROM = env.int("SYNC_WORKLOADS_WIDE_FROM", default=8)
# Workloads a sync run syncs at once, each thread on its own database connection (a sync mostly
# waits on PostgreSQL); 1: one after another.
SYNC_WORKLOADS_THREADS = env.int("SYNC_WORKLOADS_THREADS", default=4)

# --- The portal's own Prometheus metrics (portal/metrics/, /metrics) --------------------------
# /metrics answers a request bearing this token (Authorization: Bearer ...), or one from these
# addresses that came through no proxy; nobody else.
METRICS_TOKEN = env("METRICS_TOKEN", default="")
METRICS_ALLOWED_CIDRS = env.list("METRICS_ALLOWED_CIDRS", default=["127.0.0.0/8", "::1/128"])
METRICS_GRANTS_EXPIRING_WITHIN_HOURS = env.int("METRICS_GRANTS_EXPIRING_WITHIN_HOURS", default=168)
# Each Celery worker serves its task metrics on this port (0: not at all).
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=9808)

# --- Retention (portal/retention.py, docs/configuration.md) -------------------------------------
# Days each kind of record is kept (a whole number, 1 or more); usage samples keep
# RAW_SAMPLE_RETENTION_DAYS above. The purge runs in batches of RETENTION_PURGE_BATCH rows.
RETENTION_DAYS = {
    "audit": env.int("RETENTION_AUDIT_DAYS", default=2555),
    "workload_events": env.int("RETENTION_WORKLOAD_EVENTS_DAYS", default=365),
    "notification_deliveries": env.int("RETENTION_NOTIFICATION_DELIVERIES_DAYS", default=90),
    "health_events": env.int("RETENTION_HEALTH_EVENTS_DAYS", default=400),
    "allocation_intervals": env.int("RETENTION_ALLOCATION_INTERVALS_DAYS", default=400),
}
RETENTION_PURGE_BATCH = env.int("RETENTION_PURGE_BATCH", default=5000)
CELERY_BEAT_SCHEDULE["purge-expired-records"] = {
    "task": "portal.tasks.purge_expired_records",
    "schedule": env.float("RETENTION_PURGE_EVERY_S", default=3600.0),
    "options": {"expires": 3000},
}
# The audit log's hash chain (tenants/audit_chain.py): rows committed since are sealed this often.
CELERY_BEAT_SCHEDULE["seal-audit-log"] = {
    "task": "tenants.tasks.seal_audit_log",
    "schedule": env.float("AUDIT_SEAL_EVERY_S", default=60.0),
    "options": {"expires": 55},
}
