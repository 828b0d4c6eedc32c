from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The ground layer: what every app stands on and which imports no app of the portal."""

    name = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core import hooks  # noqa: F401 - registers the check that every hook is filled
