from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here because models are ready only now (Django's rule, not a cycle dodge).
        from scheduler.cluster import receivers, settings_checks  # noqa: F401  (they register)
        from scheduler.workloads.selectors import usage_by_tenant
        from tenants.selectors import register_usage_counter

        register_usage_counter(usage_by_tenant)
