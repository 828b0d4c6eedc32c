from django.apps import AppConfig


class MeteringConfig(AppConfig):
    name = "metering"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The submit path asks for budgets through its admission interface: workloads never
        # import metering (a higher layer). Imported here: models are ready only now.
        from metering.services import check_budget, over_budget_tenants
        from scheduler.cluster.reconcile.specs import register_queue_hold
        from scheduler.workloads import admission

        admission.register("budget", check_budget)
        # and in the cluster: an over-budget team's queue is held (kubectl submits wait too)
        register_queue_hold(over_budget_tenants)
