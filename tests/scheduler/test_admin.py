import pytest
from django.urls import reverse
from django.utils import timezone

from catalog.services import update_resource_class
from scheduler.cluster.models import Cluster, Node, ReconcileRun, TenantSyncState

pytestmark = pytest.mark.django_db


def test_console_pages_for_nodes_runs_and_sync(client, world):
    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    cluster = Cluster.objects.create(name="local")
    Node.objects.create(
        cluster=cluster,
        name="gpu-a100-0",
        gpu_model="A100-80GB",
        gpu_count=4,
        allocatable={"nvidia.com/mig-1g.10gb": 7},
        last_seen_at=timezone.now(),
    )
    TenantSyncState.objects.create(tenant=world.tenant, status="failed", last_error="422 bad")
    ReconcileRun.objects.create(
        tenant=world.tenant,
        trigger="periodic",
        status="failed",
        started_at=timezone.now(),
        error="422 bad",
        drift=["x"],
    )
    nodes = client.get(reverse("admin:scheduler_node_changelist")).content.decode()
    assert "gpu-a100-0" in nodes and "mig-1g.10gb: 7" in nodes
    runs = client.get(reverse("admin:scheduler_reconcilerun_changelist")).content.decode()
    assert "422 bad" in runs
    tenants = client.get(reverse("admin:tenants_tenant_changelist")).content.decode()
    assert "failed: 422 bad" in tenants
    assert client.get(reverse("admin:scheduler_tenantsyncstate_changelist")).status_code == 200


@pytest.fixture
def staff_without_the_group(world):
    """Staff with every model permission on classes and pools, but no platform admin."""
    from django.contrib.auth.models import Permission

    from tests.tenants.factories import UserFactory

    user = UserFactory(username="staff", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="scheduler",
            content_type__model__in=["resourceclass", "pool"],
        )
    )
    return user


def test_price_edits_in_the_class_changelist_go_through_the_service(client, world):
    from catalog.models import ResourceClass
    from tenants.models import AuditEvent

    world.admin.is_superuser = True  # the group gives no model permissions of its own
    world.admin.save()
    client.force_login(world.admin)
    url = reverse("admin:scheduler_resourceclass_changelist")
    assert 'name="form-0-price_per_hour"' in client.get(url).content.decode()
    response = client.post(
        url,
        {
            "form-TOTAL_FORMS": 1,
            "form-INITIAL_FORMS": 1,
            "form-0-id": world.rc.pk,
            "form-0-price_per_hour": "3.5",
            "_save": "Save",  # active left unticked: the class is switched off too
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    rc = ResourceClass.objects.get(pk=world.rc.pk)
    assert (str(rc.price_per_hour), rc.active) == ("3.5000", False)
    event = AuditEvent.objects.get()
    assert (event.verb, event.actor, event.object_id) == (
        "resource_class.updated",
        world.admin,
        str(rc.pk),
    )
    assert event.before == {"price_per_hour": "1.5000", "active": True}
    assert event.after == {"price_per_hour": "3.5000", "active": False}


def test_price_edit_in_the_class_change_form_writes_one_event(client, world):
    from catalog.models import ResourceClass
    from tenants.models import AuditEvent
    from tests.admin_forms import change_form_data

    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    url = reverse("admin:scheduler_resourceclass_change", args=[world.rc.pk])
    page = client.get(url)
    form = page.context["adminform"].form
    assert set(form.fields) == {"price_per_hour", "active"}  # the rest is the catalog's
    data = change_form_data(page) | {"price_per_hour": "7.25", "slug": "renamed"}
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    rc = ResourceClass.objects.get(pk=world.rc.pk)
    assert (rc.slug, str(rc.price_per_hour), rc.active) == (world.rc.slug, "7.2500", True)
    event = AuditEvent.objects.get()
    assert event.verb == "resource_class.updated"
    assert event.after == {"price_per_hour": "7.2500"}
    # Saving again unchanged writes nothing.
    assert client.post(url, change_form_data(client.get(url))).status_code == 302
    assert AuditEvent.objects.count() == 1
    # Classes come from the catalog: none is added or deleted here.
    assert client.get(reverse("admin:scheduler_resourceclass_add")).status_code == 403
    delete = reverse("admin:scheduler_resourceclass_delete", args=[rc.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403


def test_staff_who_are_not_platform_admins_cannot_change_classes_or_pools(
    client, world, staff_without_the_group
):
    from catalog.models import Pool, ResourceClass
    from core.errors import Forbidden
    from tenants.models import AuditEvent

    client.force_login(staff_without_the_group)
    changelist = reverse("admin:scheduler_resourceclass_changelist")
    page = client.get(changelist)
    assert page.status_code == 200 and 'name="form-0-price_per_hour"' not in page.content.decode()
    edits = {
        "form-TOTAL_FORMS": 1,
        "form-INITIAL_FORMS": 1,
        "form-0-id": world.rc.pk,
        "form-0-price_per_hour": "0",
        "_save": "Save",
    }
    assert client.post(changelist, edits).status_code == 403
    change = reverse("admin:scheduler_resourceclass_change", args=[world.rc.pk])
    assert client.post(change, {"price_per_hour": "0", "active": "on"}).status_code == 403
    pool = reverse("admin:scheduler_pool_change", args=[world.pool.pk])
    assert client.post(pool, {"capacity": 99, "overcommit_ratio": "9"}).status_code == 403
    with pytest.raises(Forbidden):
        update_resource_class(
            actor=staff_without_the_group, resource_class=world.rc, price_per_hour="0"
        )
    rc = ResourceClass.objects.get(pk=world.rc.pk)
    assert (rc.price_per_hour, rc.active) == (world.rc.price_per_hour, True)
    assert Pool.objects.get(pk=world.pool.pk).capacity == world.pool.capacity
    assert not AuditEvent.objects.exists()


def test_update_resource_class_validates_and_records_only_changes(world):
    from core.errors import InvalidInput
    from tenants.models import AuditEvent

    for bad in ("-1", "abc", "1.23456"):
        with pytest.raises(InvalidInput):
            update_resource_class(actor=world.admin, resource_class=world.rc, price_per_hour=bad)
    same = update_resource_class(
        actor=world.admin, resource_class=world.rc, price_per_hour=world.rc.price_per_hour
    )
    assert same.price_per_hour == world.rc.price_per_hour and not AuditEvent.objects.exists()
    off = update_resource_class(actor=world.admin, resource_class=world.rc, active=False)
    assert off.active is False
    assert AuditEvent.objects.get().before == {"active": True}


def test_a_cluster_is_archived_from_the_admin_not_deleted(client, world):
    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    cluster = Cluster.objects.create(name="old")
    url = reverse("admin:scheduler_cluster_changelist")
    response = client.post(
        url, {"action": "archive", "_selected_action": [cluster.pk]}, follow=True
    )
    assert "Archived 1." in response.content.decode()
    cluster.refresh_from_db()
    assert cluster.archived_at is not None
    again = client.post(url, {"action": "archive", "_selected_action": [cluster.pk]}, follow=True)
    assert "already archived" in again.content.decode()
    assert "delete_selected" not in client.get(url).content.decode()
