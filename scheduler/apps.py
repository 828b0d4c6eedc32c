from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler import receivers  # noqa: F401  (connects signal receivers)
