from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here because models are ready only now (Django's rule, not a cycle dodge).
        from scheduler.cluster import settings_checks  # noqa: F401  (registers the checks)
