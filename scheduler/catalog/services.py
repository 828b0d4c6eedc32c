"""Writes of the catalog: the resource classes (and their empty pools) a GPU model offers."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from scheduler.catalog import facts
from scheduler.catalog.models import Pool, ResourceClass


def catalog_resource_classes(
    model: facts.GpuModel, shared_replicas: int = facts.SHARED_REPLICAS
) -> list[dict]:
    """The resource classes a GPU model offers, as field dicts (pure)."""
    price = model.default_price_per_hour or Decimal(0)
    classes = [
        dict(
            slug=facts.class_slug(model, ResourceClass.Kind.WHOLE),
            gpu_model=model.key,
            kind=ResourceClass.Kind.WHOLE,
            profile="",
            resource_name=facts.WHOLE_GPU_RESOURCE,
            gpu_fraction=Decimal(1),
            memory_gb=model.memory_gb,
            price_per_hour=price,
        ),
        dict(
            slug=facts.class_slug(model, ResourceClass.Kind.SHARED),
            gpu_model=model.key,
            kind=ResourceClass.Kind.SHARED,
            profile="",
            resource_name=facts.SHARED_GPU_RESOURCE,
            gpu_fraction=(Decimal(1) / shared_replicas).quantize(Decimal("0.0001")),
            memory_gb=model.memory_gb // shared_replicas,
            price_per_hour=(price / shared_replicas).quantize(Decimal("0.0001")),
        ),
    ]
    for profile in model.profiles.values():
        fraction = model.gpu_fraction(profile)
        classes.append(
            dict(
                slug=facts.class_slug(model, ResourceClass.Kind.MIG, profile.name),
                gpu_model=model.key,
                kind=ResourceClass.Kind.MIG,
                profile=profile.name,
                resource_name=profile.resource_name,
                gpu_fraction=fraction.quantize(Decimal("0.0001")),
                memory_gb=profile.memory_gb,
                price_per_hour=(price * fraction).quantize(Decimal("0.0001")),
            )
        )
    return classes


@transaction.atomic
def ensure_resource_classes(model_keys: list[str]) -> list[ResourceClass]:
    """Create the catalog's classes (and empty pools) for these models; existing rows keep the
    platform team's prices. Idempotent."""
    out = []
    for key in model_keys:
        model = facts.get_model(key)
        for fields in catalog_resource_classes(model):
            rc, _ = ResourceClass.objects.get_or_create(slug=fields["slug"], defaults=fields)
            Pool.objects.get_or_create(resource_class=rc)
            out.append(rc)
    return out
