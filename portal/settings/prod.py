from pathlib import Path

from .base import *  # noqa: F403
from .base import BASE_DIR, STATICFILES_DIRS, env

DEBUG = False
SECRET_KEY = env("SECRET_KEY")  # required: no default in production
# Empty: the pod's own ServiceAccount (in-cluster configuration), what the Helm chart runs.
KUBECONFIG = env("KUBECONFIG", default="")
SESSION_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=True)
# HTTPS only: browsers remember it for a year (HSTS), plain HTTP is redirected. TLS ends at the
# ingress, which says so in X-Forwarded-Proto; the kubelet's probes come over plain HTTP.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
# Preloading commits the whole registrable domain, for months, at hstspreload.org: the
# domain's owners decide that, so it is off by default and its check (W021) only asks then.
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Collected into the image at build time (scripts/build_image.sh), next to the code: the image's
# file system is read-only at run time.
STATIC_ROOT = BASE_DIR / "staticfiles"
# The image drops node_modules once its files are collected: a source directory that is gone is
# no longer a source (nor a staticfiles.W004 warning on every manage.py command in the image).
STATICFILES_DIRS = [
    entry
    for entry in STATICFILES_DIRS
    if Path(str(entry[1] if isinstance(entry, tuple) else entry)).is_dir()
]
