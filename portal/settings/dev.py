from catalog import kueue_integrations

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DEBUG", default=True)
# A developer's portal runs any image; production lists its registries (fails closed).
WORKLOAD_IMAGE_ALLOWLIST = env.list("WORKLOAD_IMAGE_ALLOWLIST", default=["*"])

# The local cluster runs JobSet's controller: its Kueue queues JobSets, so team Roles may make them.
KUEUE_INTEGRATIONS = env.list("KUEUE_INTEGRATIONS", default=list(kueue_integrations.LOCAL_CLUSTER))
