from catalog import dra_devices, kueue_integrations

from .base import *  # noqa: F403
from .base import env

# Off by default, as in production: the demo a newcomer runs answers a mistyped or forbidden
# address with the portal's own 404 and 403 pages, never Django's debug page with the URL map
# (DEBUG=1 brings it back for a developer who wants it).
DEBUG = env.bool("DEBUG", default=False)
# Static files straight from their sources (no collectstatic), re-read when they change:
# WhiteNoise serves them whatever DEBUG says, under gunicorn as `make run` serves the portal.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# A developer's portal runs any image; production lists its registries (fails closed).
WORKLOAD_IMAGE_ALLOWLIST = env.list("WORKLOAD_IMAGE_ALLOWLIST", default=["*"])

# The local cluster runs JobSet's controller: its Kueue queues JobSets, so team Roles may make them.
KUEUE_INTEGRATIONS = env.list("KUEUE_INTEGRATIONS", default=list(kueue_integrations.LOCAL_CLUSTER))
# The local cluster serves its DRA node's model so (localcluster/dra_node.py).
GPU_DRA_MODELS = env.list("GPU_DRA_MODELS", default=list(dra_devices.LOCAL_CLUSTER_MODELS))

# Workspaces on their own hosts w<id>.ws.localhost (another site than 127.0.0.1, the portal's
# default host), served by `python -m workspaces.proxy` on this machine.
WORKSPACE_DOMAIN = env("WORKSPACE_DOMAIN", default="ws.localhost")
WORKSPACE_SCHEME = env("WORKSPACE_SCHEME", default="http")

# The local cluster's real node is tainted gpu-portal.io/real-node (localcluster/realnode.py):
# the demo's pods tolerate it, so the work of the GPU model it plays (B200 in `make run`) runs
# there as processes, while every other model's stays on the simulated nodes.
GPU_NODE_TOLERATIONS = env.json(
    "GPU_NODE_TOLERATIONS",
    default=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpu-portal.io/real-node", "operator": "Exists", "effect": "NoSchedule"},
    ],
)
