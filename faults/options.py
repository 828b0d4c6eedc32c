"""Which faults there are, in the order a run injects them, and the short list of `make test`."""

SHORT = [
    "worker-kill-reconcile",
    "worker-kill-rollout",
    "redis-flushed",
    "postgres-restart",
    "beat-double",
]
ALL = [
    "worker-kill-reconcile",
    "worker-kill-rollout",
    "redis-restart",
    "redis-flushed",
    "apiserver-stop",
    "etcd-stop",
    "postgres-restart",
    "prometheus-stop",
    "beat-double",
]
