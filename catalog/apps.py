"""The catalog as a Django app (its models keep the label `scheduler`: see CatalogConfig)."""

from django.apps import AppConfig


class CatalogConfig(AppConfig):
    """GPU and MIG facts, resource classes and pools: what a quota is counted in. Its models
    keep the app label `scheduler` they were born with, so their tables and migrations stay."""

    name = "catalog"
    label = "catalog"
    default_auto_field = "django.db.models.BigAutoField"
