"""Approvals on a GPU model served through DRA (PostgreSQL): its classes are cut from the same
GPUs, so their grants together may not pass the GPUs' compute slices, each class still bounded
by what the GPUs could be cut into."""

import pytest

from catalog import services as catalog
from catalog.models import ResourceClass
from core.errors import CapacityExceeded
from scheduler.cluster import node_offers
from tenants.services import grants as grant_services

pytestmark = pytest.mark.django_db

MODEL = "A100-40GB"


@pytest.fixture
def one_gpu(settings, world):
    settings.GPU_DRA_MODELS = [MODEL]
    catalog.ensure_resource_classes([MODEL])
    classes = {rc.slug: rc for rc in ResourceClass.objects.filter(gpu_model=MODEL)}
    for slug, units in node_offers.dra_units(MODEL, 1).items():  # one GPU, as the inventory says
        catalog.set_pool(actor=world.admin, resource_class=classes[slug], capacity=units)
    return classes


def grant(world, rc, amount, tenant=None):
    return grant_services.grant_quota(
        actor=world.admin, tenant=tenant or world.tenant, resource_class=rc, amount=amount
    )


def test_a_4g_and_a_3g_fill_the_gpu_and_nothing_more_is_granted(world, one_gpu):
    grant(world, one_gpu["a100-40gb-mig-4g.20gb"], 1)
    grant(world, one_gpu["a100-40gb-mig-3g.20gb"], 1, tenant=world.other_tenant)
    with pytest.raises(CapacityExceeded) as refused:
        grant(world, one_gpu["a100-40gb-mig-1g.5gb"], 1)
    said = str(refused.value)
    assert "A100-40GB is served through DRA" in said
    assert "asked for 1 compute slices but only 0 of its 7" in said


def test_seven_1g_fit_where_each_class_alone_would_allow_more(world, one_gpu):
    grant(world, one_gpu["a100-40gb-mig-1g.5gb"], 7)
    # the 2g pool alone would allow 3 (what one GPU could be cut into): the slices say no
    with pytest.raises(CapacityExceeded, match="only 0 of its 7"):
        grant(world, one_gpu["a100-40gb-mig-2g.10gb"], 1, tenant=world.other_tenant)


def test_without_dra_the_classes_are_counted_alone(settings, world, one_gpu):
    settings.GPU_DRA_MODELS = []
    grant(world, one_gpu["a100-40gb-mig-1g.5gb"], 7)
    grant(world, one_gpu["a100-40gb-mig-2g.10gb"], 1)  # per class, as layouts count them
