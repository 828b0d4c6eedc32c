from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here because models are ready only now (Django's rule, not a cycle dodge).
        from portal import system_checks, wiring  # noqa: F401 - system_checks registers checks

        wiring.fill_hooks()  # every hook of tenants/hooks.py, filled in one place
