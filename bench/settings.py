"""The API bench's server settings: the test settings (their throwaway database, broker and
cluster names come from the environment) with the bench's urlconf, which adds the floor endpoint
to the portal's own URLs. Nothing else differs, so the floor runs on the same middleware,
authentication, throttling and server as the calls it is compared with."""

from portal.settings.test import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
