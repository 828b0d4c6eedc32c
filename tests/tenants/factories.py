from datetime import timedelta
from decimal import Decimal

import factory
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from catalog.models import Pool, ResourceClass
from tenants.models import CapacityRequest, CapacityRequestItem, Membership, QuotaGrant, Tenant


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw")


class PlatformAdminFactory(UserFactory):
    is_staff = True

    @factory.post_generation
    def group(self, create, extracted, **kwargs):
        if create:
            group, _ = Group.objects.get_or_create(name=settings.PLATFORM_ADMIN_GROUP)
            self.groups.add(group)


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    allowed_priority_classes = ["gpu-high", "gpu-low"]


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    tenant = factory.SubFactory(TenantFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER


class ResourceClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourceClass
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"a100-80gb-mig-{n}g.test")
    gpu_model = "A100-80GB"
    kind = ResourceClass.Kind.MIG
    profile = "3g.40gb"
    resource_name = "nvidia.com/mig-3g.40gb"
    gpu_fraction = Decimal("0.4286")
    memory_gb = 40
    price_per_hour = Decimal("1.5")


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool
        django_get_or_create = ("resource_class",)

    resource_class = factory.SubFactory(ResourceClassFactory)
    capacity = 10
    # no borrowing unless a test asks for it (the product's default is no limit: tested in
    # tests/scheduler/test_slices.py)
    borrowing_limit = 0


class CapacityRequestFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CapacityRequest

    tenant = factory.SubFactory(TenantFactory)
    requester = factory.SubFactory(UserFactory)
    starts_at = factory.LazyFunction(timezone.now)
    ends_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=7))
    justification = "tests"


class CapacityRequestItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CapacityRequestItem

    request = factory.SubFactory(CapacityRequestFactory)
    resource_class = factory.SubFactory(ResourceClassFactory)
    amount = 1


class QuotaGrantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QuotaGrant

    tenant = factory.SubFactory(TenantFactory)
    resource_class = factory.SubFactory(ResourceClassFactory)
    amount = 1
    starts_at = factory.LazyFunction(timezone.now)
