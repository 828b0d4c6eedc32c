"""Metering's settings: where DCGM's signals are read (Prometheus, its labels), GPU health's
signals, billing (basis, time zone, currency, chargeback or showback), budgets, the idle GPU
give-back, and their periodic tasks (added to the beat schedule celery_settings.py holds)."""

from .celery_settings import CELERY_BEAT_SCHEDULE
from .environment import env

# --- metering (issue 7) -------------------------------------------------------------------------
PROMETHEUS_URL = env("PROMETHEUS_URL", default="")
# The labels dcgm-exporter's series carry the pod's namespace and name in; a ServiceMonitor
# without honorLabels renames them to exported_namespace / exported_pod.
DCGM_NAMESPACE_LABEL = env("DCGM_NAMESPACE_LABEL", default="namespace")
DCGM_POD_LABEL = env("DCGM_POD_LABEL", default="pod")
# GPU health (scheduler/health, docs/health.md): the labels naming a series' node, GPU index and
# UUID, the metric of each signal, the window of counters, and how often the check runs.
DCGM_NODE_LABEL = env("DCGM_NODE_LABEL", default="Hostname")
DCGM_GPU_LABEL = env("DCGM_GPU_LABEL", default="gpu")
DCGM_UUID_LABEL = env("DCGM_UUID_LABEL", default="UUID")
GPU_HEALTH_METRICS = {
    "xid": env("GPU_HEALTH_XID_METRIC", default="DCGM_FI_DEV_XID_ERRORS"),
    "gpu_temp": env("GPU_HEALTH_GPU_TEMP_METRIC", default="DCGM_FI_DEV_GPU_TEMP"),
    "memory_temp": env("GPU_HEALTH_MEMORY_TEMP_METRIC", default="DCGM_FI_DEV_MEMORY_TEMP"),
    "ecc_uncorrectable": env("GPU_HEALTH_ECC_METRIC", default="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    "row_remap_failure": env(
        "GPU_HEALTH_ROW_REMAP_METRIC", default="DCGM_FI_DEV_ROW_REMAP_FAILURE"
    ),
    "power_throttle": env("GPU_HEALTH_POWER_METRIC", default="DCGM_FI_DEV_POWER_VIOLATION"),
    "nvlink_errors": env(
        "GPU_HEALTH_NVLINK_METRIC", default="DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
    ),
}
GPU_HEALTH_WINDOW = env("GPU_HEALTH_WINDOW", default="5m")
CELERY_BEAT_SCHEDULE["check-gpu-health"] = {
    "task": "scheduler.tasks.check_gpu_health",
    "schedule": env.float("GPU_HEALTH_EVERY_S", default=60.0),
    "options": {"expires": 55},
}
RAW_SAMPLE_RETENTION_DAYS = env.int("RAW_SAMPLE_RETENTION_DAYS", default=35)
BILLING_BASIS = env("BILLING_BASIS", default="allocation")  # allocation | quota | max
BILLING_TIME_ZONE = env("BILLING_TIME_ZONE", default="")  # empty: TIME_ZONE
# The currency every price, budget and statement is in (an ISO 4217 code; prices are entered in
# it, nothing is converted), and whether statements bill the teams (chargeback) or only report
# to them (showback: the same figures, said to be for information).
BILLING_CURRENCY = env("BILLING_CURRENCY", default="USD")
BILLING_MODE = env("BILLING_MODE", default="chargeback")  # chargeback | showback
BUDGET_ENFORCE = env.bool("BUDGET_ENFORCE", default=False)
# A team is warned when its month-end forecast (the month-so-far burn rate) passes its budget,
# once this many hours of the month have given a rate worth trusting.
BUDGET_FORECAST_AFTER_H = env.int("BUDGET_FORECAST_AFTER_H", default=24)
# After an outage, the ingest fills the minutes it missed from the allocation intervals (up to
# this many minutes back).
METERING_BACKFILL_MAX_MINUTES = env.int("METERING_BACKFILL_MAX_MINUTES", default=1440)
CELERY_BEAT_SCHEDULE["ingest-allocations"] = {
    "task": "metering.tasks.ingest_allocations",
    "schedule": env.float("METERING_INGEST_EVERY_S", default=60.0),
    "options": {"expires": 55},
}
CELERY_BEAT_SCHEDULE["roll-up-usage"] = {
    "task": "metering.tasks.roll_up",
    "schedule": env.float("METERING_ROLLUP_EVERY_S", default=300.0),
    "options": {"expires": 280},
}
CELERY_BEAT_SCHEDULE["warn-budgets"] = {
    "task": "metering.tasks.warn_budgets",
    "schedule": env.float("BUDGET_WARN_EVERY_S", default=900.0),
    "options": {"expires": 850},
}
# Idle GPUs given back (metering/idle_runs.py): each pool's idle policy (off by default) is
# applied this often, from DCGM's GPU use averaged over IDLE_USE_WINDOW. Workloads of these
# priority classes are never suspended for idleness.
IDLE_CHECK_EVERY_S = env.int("IDLE_CHECK_EVERY_S", default=60)
IDLE_USE_WINDOW = env("IDLE_USE_WINDOW", default="2m")
IDLE_EXEMPT_PRIORITY_CLASSES = env.list("IDLE_EXEMPT_PRIORITY_CLASSES", default=["gpu-critical"])
CELERY_BEAT_SCHEDULE["give-back-idle-gpus"] = {
    "task": "metering.tasks.give_back_idle_gpus",
    "schedule": float(IDLE_CHECK_EVERY_S),
    "options": {"expires": max(IDLE_CHECK_EVERY_S - 5, 5)},
}
