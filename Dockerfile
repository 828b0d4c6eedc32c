FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=portal.settings.prod
WORKDIR /app
COPY pyproject.toml ./

COPY . .
RUN pip install --no-cache-dir . \
 && SECRET_KEY=build python manage.py collectstatic --noinput
USER nobody
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
