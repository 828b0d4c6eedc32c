"""Elastic layouts by API: platform admins read and set them per MIG-capable model; bad values
are a 400 that names the field and change nothing; everyone else sees nothing."""

import pytest

from scheduler.mig.models import ElasticLayout
from tenants.models import AuditEvent
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session
from tests.tenants.factories import PlatformAdminFactory, UserFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/elastic-layouts/"


def test_models_show_the_defaults_until_set_and_a_put_is_audited(settings):
    settings.ELASTIC_LAYOUTS_MIN_WAIT_S, settings.ELASTIC_LAYOUTS_MAX_GPUS_PER_HOUR = 600, 4
    admin = session(PlatformAdminFactory())
    listed = admin.get(URL)
    assert listed.status_code == 200
    a100 = next(m for m in listed.data if m["gpu_model"] == "A100-80GB")
    assert a100 == {
        "gpu_model": "A100-80GB", "paused": False, "min_wait_s": 600, "max_gpus_per_hour": 4,
        "gpus_reshaped_last_hour": 0, "configured": False,
    }  # fmt: skip
    assert all(m["gpu_model"] != "L40S-48GB" for m in listed.data)  # not MIG-capable
    body = {"paused": True, "min_wait_s": 300, "max_gpus_per_hour": 2}
    put = admin.put(f"{URL}A100-80GB/", body, format="json")
    assert put.status_code == 200, put.data
    assert put.data["paused"] is True and put.data["configured"] is True
    assert AuditEvent.objects.filter(verb="elastic_layout.set").count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"paused": False, "min_wait_s": -5, "max_gpus_per_hour": 2}, "min_wait_s"),
        ({"paused": False, "min_wait_s": 60, "max_gpus_per_hour": 0}, "max_gpus_per_hour"),
        ({"paused": False, "min_wait_s": "soon", "max_gpus_per_hour": 2}, "min_wait_s"),
        ({"paused": False, "min_wait_s": 10**12, "max_gpus_per_hour": 2}, "min_wait_s"),
    ],
)
def test_bad_values_are_a_400_naming_the_field_and_change_nothing(body, field):
    admin = session(PlatformAdminFactory())
    answer = admin.put(f"{URL}A100-80GB/", body, format="json")
    assert answer.status_code == 400
    assert field in str(answer.data)
    assert not ElasticLayout.objects.exists()
    assert not AuditEvent.objects.filter(verb="elastic_layout.set").exists()


def test_others_see_nothing_and_change_nothing():
    user = UserFactory()
    assert session(user).get(URL).data == []
    assert session(user).get(f"{URL}A100-80GB/").status_code == 404
    body = {"paused": True, "min_wait_s": 0, "max_gpus_per_hour": 1}
    assert session(user).put(f"{URL}A100-80GB/", body, format="json").status_code in (403, 404)
    admin = PlatformAdminFactory()
    _, raw = token_services.issue_token(actor=admin, user=admin, name="ro", scopes=["read"])
    assert bearer(raw).put(f"{URL}A100-80GB/", body, format="json").status_code == 403
    assert session(admin).get(f"{URL}no-such-gpu/").status_code == 404
    assert not ElasticLayout.objects.exists()
