from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DEBUG", default=True)
# A developer's portal runs any image; production lists its registries (fails closed).
WORKLOAD_IMAGE_ALLOWLIST = env.list("WORKLOAD_IMAGE_ALLOWLIST", default=["*"])
