"""Issue 49, 5 and 6, in headless Chromium against the live portal (no cluster needed: the pages
read the database), on a phone (390 px) and a desktop (1280 px), axe-core at 0 violations: the
submit form shows the chosen kind's fields, says every refusal in one round at its own field,
offers only the team's granted shapes with what is free, and previews cost and whether it starts
now, queues or never fits; the notebook form offers human GPU labels (the smallest granted
slice by default) and a priority with what it means, says its refusals at their fields, and a
notebook is listed as a workspace with no server token on its pages."""

from decimal import Decimal

import pytest
from playwright.sync_api import Page, expect

from scheduler.workloads.models import Workload
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    people,
    sign_in,
)
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import PoolFactory, QuotaGrantFactory, ResourceClassFactory
from workspaces import server_secret
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
THREE_G = "a100-80gb-mig-3g.40gb"


@pytest.fixture
def granted(people):  # noqa: F811
    """team-a holds 2 × A100 3g.40gb (6 of an A100's 7 slices) at $1.50/h each; a whole A100
    (7 slices, nothing to borrow) and an H100 shape (no grant of that model) exist but are
    beyond the team's quota."""
    people.rc.price_per_hour = Decimal("1.50")
    people.rc.save()
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=2)
    whole = ResourceClassFactory(
        slug="a100-80gb", kind="whole", profile="", resource_name="nvidia.com/gpu",
        gpu_fraction=Decimal("1"), memory_gb=80, gpu_model="A100-80GB",
    )  # fmt: skip
    PoolFactory(resource_class=whole, capacity=2, borrowing_limit=0)
    h100 = ResourceClassFactory(slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB")
    PoolFactory(resource_class=h100, capacity=4)
    return people


def said_at(page: Page, field_id: str):
    """The field's own error, next to it, and what the field says it is described by."""
    field = page.locator(f"#{field_id}")
    expect(field).to_have_attribute("aria-invalid", "true")
    error = page.locator(f"#{field_id}_error")
    described = field.get_attribute("aria-describedby") or ""
    assert f"{field_id}_error" in described.split(), described
    return error


# --- the submit form (issue 49, 5) --------------------------------------------------------------


@WIDTHS
def test_the_submit_form_shows_the_chosen_kinds_fields_only(
    live_server, browser, granted, viewport
):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
    job = page.locator("fieldset.kind-job")
    deployment = page.locator("fieldset.kind-deployment")
    # a job by default: its fields (gang pods, retries) show, a deployment's (port) do not
    expect(page.get_by_label("Job (training, batch)")).to_be_checked()
    expect(job).to_be_visible()
    expect(page.locator("#id_pods")).to_be_visible()
    expect(deployment).to_be_hidden()
    expect(page.locator("#id_port")).to_be_hidden()
    expect(page.locator(".kind-note").first).to_be_hidden()
    assert_accessible(page)
    assert no_sideways_scroll(page)

    page.get_by_label("Deployment (inference)").check()
    expect(deployment).to_be_visible()
    expect(page.locator("#id_port")).to_be_visible()
    expect(page.locator("#id_max_replicas")).to_be_visible()
    expect(job).to_be_hidden()
    expect(page.locator("#id_pods")).to_be_hidden()
    assert_accessible(page)

    page.get_by_label("Job (training, batch)").check()
    expect(job).to_be_visible()
    expect(deployment).to_be_hidden()


@WIDTHS
def test_three_bad_fields_show_three_errors_each_at_its_own_field(
    live_server, browser, granted, viewport
):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
    page.get_by_label("Name").fill("Train_7")
    page.get_by_label("GPU resource").select_option(THREE_G)
    page.get_by_label("Units per pod").fill("30")
    page.locator("details.pod-fields summary").click()
    page.locator("#id_env").fill("no equals sign")
    page.get_by_role("button", name="Submit").click()

    expect(page.locator(".form-errors")).to_contain_text("Please correct the 3 fields marked")
    expect(said_at(page, "id_name")).to_contain_text("Train_7")
    expect(said_at(page, "id_units")).to_contain_text("can never run this")
    expect(said_at(page, "id_env")).to_contain_text("line 1: write KEY=value")
    # the class chosen is not to blame, and what was typed is kept
    expect(page.locator("#id_resource_class")).not_to_have_attribute("aria-invalid", "true")
    expect(page.locator("#id_resource_class_error")).to_have_count(0)
    expect(page.locator("[aria-invalid='true']")).to_have_count(3)
    expect(page.get_by_label("Name")).to_have_value("Train_7")
    expect(page.locator("#id_env")).to_be_visible()  # its fieldset opens on its refusal
    # each error is in its field's own block, drawn below the field and above the next one
    for field_id in ("id_name", "id_units", "id_env"):
        block = page.locator(f".field.has-error:has(#{field_id})")
        expect(block.locator(f"#{field_id}_error")).to_have_count(1)
        field = page.locator(f"#{field_id}").bounding_box()
        error = page.locator(f"#{field_id}_error").bounding_box()
        below = block.locator("xpath=following-sibling::*[1]").bounding_box()
        assert field and error and error["y"] >= field["y"] + field["height"], field_id
        assert below is None or error["y"] + error["height"] <= below["y"] + 1, field_id
    assert not Workload.objects.exists()
    assert_accessible(page)
    assert no_sideways_scroll(page)


@WIDTHS
def test_the_picker_offers_only_granted_shapes_with_their_free_slices(
    live_server, browser, granted, viewport
):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
    picker = page.get_by_label("GPU resource")
    offered = picker.locator("option:not([value=''])")
    expect(offered).to_have_count(1)
    expect(offered).to_have_attribute("value", THREE_G)
    expect(offered).to_contain_text("A100-80GB MIG 3g.40gb")
    expect(offered).to_contain_text("2 × 3g.40gb (= 6 of 6 slices) free")
    expect(picker.locator("optgroup")).to_have_attribute("label", f"{granted.tenant.name}'s quota")
    # 6 slices hold no whole A100 (7), and the team has no grant of H100s
    for slug in ("a100-80gb", "h100-80gb-mig-3g.40gb"):
        expect(picker.locator(f"option[value='{slug}']")).to_have_count(0)
    expect(page.get_by_role("link", name="Ask for capacity")).to_be_visible()
    assert_accessible(page)


@WIDTHS
def test_the_preview_says_cost_per_hour_and_starts_now_queues_or_never_fits(
    live_server, browser, granted, viewport
):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
    preview = page.locator("#preview")
    expect(preview).to_contain_text("Choose a GPU resource and how many")
    page.get_by_label("Name").fill("train-7")
    page.get_by_label("GPU resource").select_option(THREE_G)
    expect(preview).to_contain_text("Starts now")
    expect(preview).to_contain_text("1 × A100-80GB MIG 3g.40gb at list price: 1.50 USD/h")
    assert_accessible(page)

    # a teammate's job holds both units: one more queues, behind it
    WorkloadFactory(
        tenant=granted.tenant, name="big", resources={THREE_G: 2}, state=Workload.State.RUNNING,
        gpu_model="A100-80GB", priority_class="gpu-low",
    )  # fmt: skip
    page.get_by_label("Units per pod").fill("2")
    expect(preview).to_contain_text("Queues")
    expect(preview).to_contain_text("big")
    expect(preview).to_contain_text("3.00 USD/h")

    # more than the grant and the pool can ever hold
    page.get_by_label("Units per pod").fill("30")
    expect(preview).to_contain_text("Never fits as it is")
    expect(preview).to_contain_text("45.00 USD/h")
    expect(preview.locator(".hint.warn")).to_have_count(1)
    assert_accessible(page)
    assert no_sideways_scroll(page)


# --- the notebook form (issue 49, 6) ------------------------------------------------------------


@WIDTHS
def test_the_notebook_form_offers_human_gpu_labels_and_a_priority_with_why(
    live_server, browser, granted, viewport
):
    # a 1g slice drawn on the team's 6 A100 slices: the smallest, so the default, before the 3g
    one_g = ResourceClassFactory(
        slug="a100-80gb-mig-1g.10gb", profile="1g.10gb", resource_name="nvidia.com/mig-1g.10gb",
        gpu_model="A100-80GB", gpu_fraction=Decimal("0.1429"), memory_gb=10,
    )  # fmt: skip
    PoolFactory(resource_class=one_g, capacity=7)
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workspaces/")
    gpu = page.get_by_label("GPU")
    options = gpu.locator("option")
    labels = options.all_inner_texts()
    # each shape with what the team has free of it, in the one unit of the pages
    assert labels and labels[0].startswith("A100-80GB MIG 1g.10gb · 6 × 1g.10gb (= 6 of"), labels
    assert any(label.startswith("A100-80GB MIG 3g.40gb · 2 × 3g.40gb (= 6 of") for label in labels)
    assert all(label.endswith("slices) free") for label in labels), labels
    assert not any(label.startswith(("a100-", "h100-")) for label in labels)  # no raw slugs
    values = [options.nth(n).get_attribute("value") for n in range(options.count())]
    assert "a100-80gb" not in values and "h100-80gb-mig-3g.40gb" not in values
    expect(gpu).to_have_value(one_g.slug)  # the smallest granted slice
    priority = page.get_by_label("Priority")
    expect(priority).to_have_value("gpu-low")
    expect(priority.locator("option")).to_have_text(["gpu-low (normal)", "gpu-high"])
    expect(page.locator("#ws-priority-help")).to_contain_text(
        "A higher priority preempts teammates' lower-priority jobs"
    )
    assert priority.get_attribute("aria-describedby") == "ws-priority-help"
    assert_accessible(page)
    assert no_sideways_scroll(page)


@WIDTHS
def test_the_notebook_form_says_each_refusal_at_its_field(live_server, browser, granted, viewport):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workspaces/")
    page.get_by_label("Name").fill("Not_A_Name")
    page.get_by_label("Image").fill("bad image")
    page.get_by_label("Time limit").fill("900")
    page.get_by_role("button", name="Open").click()
    expect(page.locator(".form-errors")).to_contain_text("Please correct the 3 fields marked")
    for field_id, said in (
        ("ws-name", "name 'Not_A_Name'"),
        ("ws-image", "give an image reference without spaces"),
        ("ws-limit", "give a time limit between 15 min and 7 d"),
    ):
        field = page.locator(f"#{field_id}")
        expect(field).to_have_attribute("aria-invalid", "true")
        expect(field).to_have_attribute("aria-describedby", f"{field_id}-error")
        expect(page.locator(f"#{field_id}-error")).to_contain_text(said)
    expect(page.locator("[aria-invalid='true']")).to_have_count(3)
    expect(page.get_by_label("Name")).to_have_value("Not_A_Name")  # what was typed is kept
    expect(page.get_by_label("Name")).to_be_focused()  # the first field in error
    assert not Workspace.objects.exists()
    assert_accessible(page)
    assert no_sideways_scroll(page)


@WIDTHS
def test_a_notebook_is_listed_as_a_workspace_and_shows_no_server_token(
    live_server, browser, granted, viewport, monkeypatch
):
    # no task to the tests' broker: no worker runs here, and its objects are the cluster's
    monkeypatch.setattr(workspace_services, "_enqueue_apply", lambda workspace_id: None)
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workspaces/")
    page.get_by_label("Name").fill("nb")
    page.get_by_label("Priority").select_option("gpu-high")
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_text("nb is starting")).to_be_visible()
    ws = Workspace.objects.get(name="nb")
    assert ws.run is not None and ws.run.priority_class == "gpu-high"
    assert any(a.startswith("--ServerApp.password=") for a in ws.run.args)  # it is run so
    # its token is its own (issue 51), from its Secret through the environment, never shown
    assert ws.run.env["JUPYTER_TOKEN"] == {"secret": "ws-nb-server", "key": "token"}
    secret = server_secret.unseal(ws.server_secret_sealed)
    assert secret and secret not in page.content()
    gpu = page.locator("dl.facts dt", has_text="GPU").locator("xpath=following-sibling::dd[1]")
    expect(gpu).to_have_text("A100-80GB MIG 3g.40gb at gpu-high")  # a name, not the slug
    assert "--ServerApp.token=" not in page.content()
    assert_accessible(page)

    page.goto(f"{live_server.url}/teams/team-a/workloads/")
    row = page.locator("tbody tr", has_text=ws.run.name)
    expect(row.locator("td[data-label='Kind']")).to_have_text("Notebook (workspace)")
    kinds = page.locator("tbody td[data-label='Kind']")
    expect(kinds.filter(has_text="Job (training, batch)")).to_have_count(0)
    assert_accessible(page)

    page.goto(f"{live_server.url}/teams/team-a/")
    row = page.locator("tbody tr", has_text=ws.run.name)
    expect(row.locator("td[data-label='Kind']")).to_have_text("Notebook (workspace)")

    page.goto(f"{live_server.url}/workloads/{ws.run.pk}/")
    kind = page.locator("dl.facts dt", has_text="Kind").locator("xpath=following-sibling::dd[1]")
    expect(kind).to_contain_text("Notebook (workspace)")
    command = page.locator("dl.facts dt", has_text="Command").locator(
        "xpath=following-sibling::dd[1]"
    )
    expect(command).to_contain_text("--no-browser")  # its command line is shown, less those
    content = page.content()
    for hidden in ("--ServerApp.token=", "--ServerApp.password=", "--auth=", secret):
        assert hidden not in content, hidden
    assert_accessible(page)
    assert no_sideways_scroll(page)
