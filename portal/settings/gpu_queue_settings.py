"""Settings of how GPUs are queued and counted: the quota unit, the models served through DRA,
and what the portal asks of Kueue. Read from the environment (docs/configuration.md lists
them all)."""

from catalog import kueue_integrations

from .environment import env

# What grants are counted in, in Kueue as in the portal (catalog/slices.py):
# "slices" (a model's compute slices: whole GPU 7, MIG g-profile g; Kueue's Configuration must
# carry the matching resources.transformations, as the chart and the local cluster do) or
# "class" (one quota line per resource class; Kueue without transformations).
GPU_QUOTA_UNIT = env("GPU_QUOTA_UNIT", default="slices")
# Catalog keys of the GPU models served through DRA (MIG cut on demand; docs/dra.md, E007).
GPU_DRA_MODELS = env.list("GPU_DRA_MODELS", default=[])
# Kueue's waitForPodsReady, printed by `manage.py kueue_config` (the local cluster reads the same
# names): a workload whose pods are not all ready this long after admission is evicted whole and
# requeued after a backoff doubling from the base up to the max; after the limit's evictions
# (empty: none) Kueue deactivates it. Defaults: catalog.kueue_config.PodsReady.
KUEUE_PODS_READY_TIMEOUT_S = env.int("KUEUE_PODS_READY_TIMEOUT_S", default=300)
KUEUE_PODS_READY_REQUEUE_BASE_S = env.int("KUEUE_PODS_READY_REQUEUE_BASE_S", default=60)
KUEUE_PODS_READY_REQUEUE_MAX_S = env.int("KUEUE_PODS_READY_REQUEUE_MAX_S", default=3600)
_requeue_limit = env("KUEUE_PODS_READY_REQUEUE_LIMIT", default="").strip()  # the chart sets ""
KUEUE_PODS_READY_REQUEUE_LIMIT = int(_requeue_limit) if _requeue_limit else None
KUEUE_PODS_READY_BLOCK_ADMISSION = env.bool("KUEUE_PODS_READY_BLOCK_ADMISSION", default=False)
# Kueue's job integrations (its Configuration's `integrations.frameworks`, comma-separated, as
# Kueue names them): the four on Kubernetes' own kinds, plus those of projects the platform team
# installed (jobset.x-k8s.io/jobset, kubeflow.org/pytorchjob, ray.io/rayjob, ...), whose kinds
# team members may then create. Checked at start-up (scheduler.E006; catalog/kueue_integrations.py).
KUEUE_INTEGRATIONS = env.list("KUEUE_INTEGRATIONS", default=list(kueue_integrations.DEFAULT))
# Where the running Kueue keeps its Configuration (its Helm chart's and release manifests'
# ConfigMap, key controller_manager_config.yaml): read to check the keys above hold.
KUEUE_CONFIG_NAMESPACE = env("KUEUE_CONFIG_NAMESPACE", default="kueue-system")
KUEUE_CONFIG_MAP = env("KUEUE_CONFIG_MAP", default="kueue-manager-config")
