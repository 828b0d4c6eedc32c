"""Gunicorn's configuration for the portal's web pods (the Helm chart, docker-compose, the image's
CMD): `gunicorn -c deploy/gunicorn.conf.py portal.wsgi:application`.

Every value can be changed from the environment (docs/configuration.md, "Web server")."""

import json
import os
from datetime import UTC, datetime

from gunicorn.glogging import Logger


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


bind = f"0.0.0.0:{_int('PORT', 8000)}"
# Threads: a connection kept alive by a proxy waits in the worker's poller instead of holding a
# whole sync worker; a slow request holds one thread, not one process.
worker_class = "gthread"
# (2 × CPUs) + 1, but the CPUs a container sees are the node's, not its limit: capped, and a pod
# sized for more sets WEB_WORKERS.
workers = _int("WEB_WORKERS", min(2 * _cpus() + 1, 8))
threads = _int("WEB_THREADS", 4)
# Behind a proxy (the ingress keeps connections open to the pods): a few seconds of idle
# keep-alive saves reconnecting, without holding connections a client has forgotten.
keepalive = _int("WEB_KEEPALIVE", 5)
# A worker that took no heartbeat for this long is killed and replaced (a stuck request);
# on SIGTERM, requests in flight get graceful_timeout to finish, below Kubernetes' 30 s.
timeout = _int("WEB_TIMEOUT", 60)
graceful_timeout = _int("WEB_GRACEFUL_TIMEOUT", 25)
# A worker is replaced after this many requests (a slow leak stays bounded); the jitter keeps
# the workers from restarting at the same moment. Not by default with multiprocess metrics
# (PROMETHEUS_MULTIPROC_DIR, the image): a replaced worker's files stay (its counts must not
# vanish from the totals) and every scrape reads them all, so scrapes would grow slower with
# each replacement for the pod's whole life.
max_requests = _int("WEB_MAX_REQUESTS", 0 if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else 2000)
max_requests_jitter = _int("WEB_MAX_REQUESTS_JITTER", 200)
# The portal is imported once, in the master (with its URLs and views: when_ready below), and
# each worker is a fork of it. A worker that replaces another then starts at once, instead of
# importing Django, DRF and the Kubernetes client again: seconds of CPU, while the other workers
# carry every call (the API bench's p99 showed each replacement). Nothing connects at import:
# PostgreSQL, Redis and the API server are reached on first use, in each worker.
preload_app = os.environ.get("WEB_PRELOAD", "1") != "0"
# The proxies whose X-Forwarded-Proto (the scheme) gunicorn believes; Django's own setting
# (SECURE_PROXY_SSL_HEADER) decides for the portal. Comma-separated addresses or CIDRs, "*": any.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
# Each worker's heartbeat is a file it touches every second. The image's root file system is
# read-only and /tmp is the chart's emptyDir, on the node's disk: a slow disk would stall the
# heartbeat and get healthy workers killed. /dev/shm is memory (a tmpfs in every container,
# writable even with a read-only root); /tmp where it is missing.
worker_tmp_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # noqa: S108
# Nothing in a pod uses gunicornc, and its socket would go under $HOME (read-only in the image).
control_socket_disable = True
accesslog = "-"  # stdout, one JSON object a line (the JsonAccessLogger below)
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()


class JsonAccessLogger(Logger):
    """Access lines as JSON, like the portal's own log lines (core/logging.py): what a log store
    parses without a pattern, with the request id the portal answers in X-Request-ID."""

    def access(self, resp, req, environ, request_time):
        if not self.access_log_enabled:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        headers = {name.lower(): value for name, value in (resp.headers or [])}
        entry = {
            "ts": datetime.now(tz=UTC).isoformat(timespec="milliseconds"),
            "level": "INFO",
            "logger": "gunicorn.access",
            "request_id": headers.get("x-request-id", "-"),
            "remote_addr": environ.get("REMOTE_ADDR", "-"),
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "query": environ.get("QUERY_STRING", ""),
            "status": int(status),
            "bytes": getattr(resp, "sent", None),
            "duration_ms": round(request_time.total_seconds() * 1000, 1),
            "user_agent": environ.get("HTTP_USER_AGENT", ""),
        }
        try:
            self.access_log.info(json.dumps(entry))
        except Exception:  # noqa: BLE001 - a log line never fails a request
            self.exception("could not write an access log line")


logger_class = JsonAccessLogger


# --- Prometheus metrics from every worker (portal/metrics/) ------------------------------------
# With PROMETHEUS_MULTIPROC_DIR set (the image sets /tmp/prometheus), each worker writes its
# samples to files there and /metrics adds them up across workers.
def when_ready(server):
    """With preload_app, import the URLconf and so every view here, before the workers fork,
    rather than on each worker's first request."""
    if server.cfg.preload_app:
        from django.urls import get_resolver

        get_resolver().url_patterns  # noqa: B018 - imports them


def on_starting(server):
    """Start from an empty directory: files of an earlier run (a restarted container keeps its
    emptyDir) would add a dead process's counts to this one's."""
    from portal.metrics.registry import clear_multiprocess_dir  # no models: Django is not set up

    clear_multiprocess_dir()
