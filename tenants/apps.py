from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from tenants import receivers  # noqa: F401 - connects the signal receivers
