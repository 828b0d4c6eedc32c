"""Inference services' autoscaling (scheduler/workloads/kinds/, docs/inference.md): the pod
metrics their HorizontalPodAutoscalers follow and how soon they scale down."""

from .environment import env

# Pod metrics that autoscaled deployments follow, as a Prometheus adapter serves them on the
# custom metrics API: DCGM's GPU utilisation gauge (0-100 %), a request latency in seconds and
# the requests a pod answers per second (prometheus-adapter's name for rate(requests_total)).
AUTOSCALING_GPU_UTIL_METRIC = env("AUTOSCALING_GPU_UTIL_METRIC", default="DCGM_FI_DEV_GPU_UTIL")
AUTOSCALING_LATENCY_METRIC = env(
    "AUTOSCALING_LATENCY_METRIC", default="http_request_duration_seconds_p95"
)
AUTOSCALING_REQUEST_RATE_METRIC = env(
    "AUTOSCALING_REQUEST_RATE_METRIC", default="requests_per_second"
)
# How long an inference service's metric must stay below target before it scales down (its
# HPA's behavior.scaleDown.stabilizationWindowSeconds; Kubernetes' default).
AUTOSCALING_SCALE_DOWN_WINDOW_S = env.int("AUTOSCALING_SCALE_DOWN_WINDOW_S", default=300)
