"""The portal's own Prometheus metrics (docs/configuration.md, "Metrics").

- HTTP request durations, by view (the URL pattern's name, never the raw path), method, status:
  `middleware.RequestMetricsMiddleware`.
- Celery task runs (counted when a task starts), failures and durations, by task: Celery's
  signals (`celery_signals`, connected when portal.celery imports it); each worker serves them
  on WORKER_METRICS_PORT.
- The portal's state, computed when Prometheus scrapes the web's /metrics (`views.metrics`):
  `collector.PortalStateCollector`, three queries and one Redis round trip: reconcile failures
  and lag per tenant, Celery queue depths, pending approvals, grants about to end. Only the
  web's /metrics computes them, never a worker's port.

`registry` holds what they share: the counters and histograms, the multiprocess directory and
the registry a process serves. Several processes (gunicorn's workers, a prefork Celery worker's
children) add up through prometheus-client's multiprocess mode when PROMETHEUS_MULTIPROC_DIR is
set. A prefork worker needs it: its children run the tasks and its main process serves the
port. The image sets it, and `make run` sets one for its worker (scripts/serve.sh) and one for
its gunicorn (scripts/serve_web.sh); without it (the tests' live servers and in-process
workers), the process's own registry is served.

portal.celery imports `celery_signals` before Django is set up, and gunicorn's master imports
`registry`: those two import no models; `collector` and `views` load with the URLs."""
