"""Celery's settings: the broker, acknowledgement and time limits, the queues tasks are routed
to, and the beat (one at a time) with its first periodic tasks; base.py imports them all and
adds each app's own periodic tasks to CELERY_BEAT_SCHEDULE."""

from .environment import env

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=240)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=300)
# Longer than the hard limit, so a slow task is not redelivered while it still runs.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_TIME_LIMIT * 2 + 60}
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {  # the first that matches
    # one process follows the workloads, so each run takes on what its last one read of the
    # cluster and kept (lifecycle/reading.py KEPT): a queue of its own for a worker of one
    "scheduler.tasks.sync_workloads": {"queue": "follow"},
    "scheduler.tasks.*": {"queue": "reconcile"},
    "metering.tasks.*": {"queue": "metering"},
    "tenants.tasks.warn_expiring_grants": {"queue": "notify"},
    "tenants.tasks.deliver_notification": {"queue": "notify"},
    "tenants.tasks.deliver_due_notifications": {"queue": "notify"},
}
# One beat at a time (portal/beat.py): how long a dead beat's lock outlives it.
BEAT_LOCK_TTL_S = env.float("BEAT_LOCK_TTL_S", default=30.0)
CELERY_BEAT_SCHEDULER = "portal.beat:SingletonScheduler"
# Booking ahead (issue 52): the boundary pass ("grant-boundaries" below) looks this far back
# for grants that started or ended, so a pass missed while the workers restarted is made up;
# a booking's team is warned this long before it ends.
BOOKING_LOOKBACK_S = env.int("BOOKING_LOOKBACK_S", default=300)
BOOKING_END_WARNING_HOURS = env.int("BOOKING_END_WARNING_HOURS", default=24)
# Many clusters (issue 54): how often every registered cluster's health is checked (its API
# server, credentials and Kueue; scheduler/cluster/probes.py).
CLUSTER_CHECK_EVERY_S = env.float("CLUSTER_CHECK_EVERY_S", default=60.0)
CELERY_BEAT_SCHEDULE = {
    "give-tokens-an-expiry": {  # tokens made before every token had an end (with notice)
        "task": "tenants.tasks.give_tokens_an_expiry",
        "schedule": env.float("TOKEN_EXPIRY_EVERY_S", default=86400.0),
        "options": {"expires": 3600},
    },
    "expire-grants": {
        "task": "tenants.tasks.expire_grants",
        "schedule": env.float("EXPIRE_GRANTS_EVERY_S", default=60.0),
        "options": {"expires": 55},
    },
    "grant-boundaries": {  # a booking reaches its queue within seconds of its start (issue 52)
        "task": "tenants.tasks.hint_grant_boundaries",
        "schedule": env.float("BOOKING_BOUNDARY_EVERY_S", default=10.0),
        "options": {"expires": 9},
    },
    "deliver-notifications": {  # what a lost message or a lost retry left pending
        "task": "tenants.tasks.deliver_due_notifications",
        "schedule": env.float("DELIVER_NOTIFICATIONS_EVERY_S", default=60.0),
        "options": {"expires": 55},
    },
    "reconcile-all": {
        "task": "scheduler.tasks.reconcile_all",
        "schedule": env.float("RECONCILE_ALL_EVERY_S", default=60.0),
        "options": {"expires": 55},
    },
    "sync-inventory": {  # the portal's own cluster, and each worker of a fleet in a task
        "task": "scheduler.tasks.sync_inventory",
        "schedule": env.float("SYNC_INVENTORY_EVERY_S", default=30.0),
        "options": {"expires": 25},
    },
    "check-clusters": {  # each registered cluster's health: the clusters page and /readyz
        "task": "scheduler.tasks.check_clusters",
        "schedule": CLUSTER_CHECK_EVERY_S,
        "options": {"expires": max(1.0, CLUSTER_CHECK_EVERY_S - 5)},
    },
    "warn-expiring-grants": {
        "task": "tenants.tasks.warn_expiring_grants",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    },
}
