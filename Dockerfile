# The portal's image: web (gunicorn), Celery worker and beat all run it. Read-only at run time
# (the Helm chart mounts an emptyDir at /tmp), as uid 10001.
#
# Build stage: Python dependencies into a virtualenv, then scripts/build_image.sh (the same steps
# tests/deploy/test_image.py runs without a container engine): the app copied as .dockerignore
# says, htmx and Chart.js from npm, static files collected, node_modules dropped again.
FROM python:3.11-slim-bookworm AS build
ENV PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The dependencies first: this layer is rebuilt only when pyproject.toml (or the CLI) changes.
# (pyproject's packages = ["cli"]: the Django apps run from /app, not from site-packages.)
COPY pyproject.toml ./
COPY cli ./cli
RUN pip install --no-cache-dir .
COPY . .
RUN PYTHON=/opt/venv/bin/python scripts/build_image.sh /app --no-pip \
 && python -m compileall -q /app

# Run stage: no compiler, no node, no npm cache; the virtualenv and the built app only.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=portal.settings.prod \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus
RUN useradd --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin portal
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
USER 10001
# 8000: the portal (gunicorn); 9808: a Celery worker's metrics (WORKER_METRICS_PORT).
EXPOSE 8000 9808
CMD ["gunicorn", "-c", "deploy/gunicorn.conf.py", "portal.wsgi:application"]
