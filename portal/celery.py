import os

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun

from core.request_context import get_request_id, new_request_id, set_request_id

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Task runs, failures and durations, and each worker's metrics port (Celery's signals).
import portal.metrics.celery_signals  # noqa: E402, F401


# The request id travels from the web request that queued a task to the task's log lines and
# audit rows, so one id follows a change from click to cluster.
@before_task_publish.connect
def _add_request_id(headers=None, **_kwargs):
    if headers is not None and "request_id" not in headers:
        headers["request_id"] = get_request_id()


@task_prerun.connect
def _bind_request_id(task=None, **_kwargs):
    rid = getattr(task.request, "request_id", None) if task else None
    set_request_id(rid or new_request_id())


@task_postrun.connect
def _unbind_request_id(**_kwargs):
    set_request_id(None)
