"""Browser self-service for teams. Views parse input, call one service, render; every object is
fetched through `visible_to(user)`, so another tenant's pages are 404."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from catalog.advice import sharing_advice
from catalog.models import ResourceClass
from core import sealing
from core.errors import InvalidInput, ServiceError
from core.permissions import is_platform_admin
from tenants import (
    asking,
    calendars,
    consequences,
    display,
    hooks,
    permissions,
    selectors,
    team_calendar,
)
from tenants.forms import CapacityRequestForm, MemberForm, RoleForm, TokenForm
from tenants.models import ApiToken, AuditEvent, CapacityRequest, Membership, QuotaGrant, Tenant
from tenants.services import departments as department_services
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services


def _tenant(request, slug: str) -> Tenant:
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


# The one display of a new token's secret: kept in the session only between the POST and the
# page it redirects to, which pops it (a reload then shows the list, never the secret again);
# sealed (encrypted, worthless after NEW_TOKEN_DISPLAY_S), never in plain text in the store.
NEW_TOKEN_SESSION_KEY = "new_token_secret"
NEW_TOKEN_DISPLAY_S = 120
# A refused "add member": what was typed and why, carried over the redirect to the team page so
# the error shows at the form, not at the top of the page.
MEMBER_FORM_SESSION_KEY = "member_form_refused"


def confirm_page(request, *, title, consequences, action, confirm_label, back_url, back_label):
    """A destructive action's GET: what it will do, and one button that does it (POST)."""
    return render(
        request,
        "portal/confirm.html",
        {
            "title": title,
            "consequences": consequences,
            "action": action,
            "confirm_label": confirm_label,
            "back_url": back_url,
            "back_label": back_label,
        },
    )


def _apply_error(form, exc: ServiceError, field_map: dict[str, str] | None = None) -> None:
    """Put a service's refusal next to the field it is about (or on top of the form)."""
    field = (field_map or {}).get(exc.field or "", exc.field)
    form.add_error(field if field in form.fields else None, exc.detail)


def _envelope_hours(tenant: Tenant, resource_class: str | None) -> list[int]:
    """The longest auto-approved grant of each class the team may ask for (of the one class
    asked for, where the link names one), by the platform's rules and its department's."""
    classes = ResourceClass.objects.filter(active=True, pool__capacity__gt=0)
    if resource_class and resource_class.isdigit():
        classes = classes.filter(pk=int(resource_class))
    envelopes = department_services.team_envelopes(tenant, classes)
    return [envelope.max_duration_hours for envelope in envelopes.values()]


@login_required
def request_create(request, slug):
    tenant = _tenant(request, slug)
    # "Ask for more" links prefill the class (and amount): ?resource_class=<id>&amount=<n>
    prefill = {k: request.GET[k] for k in ("resource_class", "amount") if request.GET.get(k)}
    if "resource_class" in prefill:
        prefill.setdefault("amount", "1")
    # a length the auto-approval policy accepts, for the class asked for if one is (issue 49, 9)
    prefill["duration"] = asking.default_duration(
        _envelope_hours(tenant, prefill.get("resource_class"))
    )
    form = CapacityRequestForm(request.POST or None, initial=prefill)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created = request_services.submit_capacity_request(
                actor=request.user,
                tenant=tenant,
                items={data["resource_class"].slug: data["amount"]},
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                justification=data["justification"],
            )
        except ServiceError as exc:
            _apply_error(form, exc, {"items": "amount"})
        else:
            if created.state == CapacityRequest.State.APPROVED:
                messages.success(request, "Approved at once by policy: the quota is on its way.")
            else:
                messages.info(request, "Sent to the platform team for approval.")
            return redirect("tenants:request_detail", pk=created.pk)
    return render(
        request,
        "tenants/request_form.html",
        {
            "tenant": tenant,
            "form": form,
            # a refused submit keeps the hint of what was chosen, not the blank one
            "hint": ask_hint(tenant, request.POST if request.method == "POST" else prefill),
            "pools": selectors.pool_summary(),
        },
    )


def ask_hint(tenant: Tenant, data) -> dict | None:
    """The live hint for the ask form's `data`: when it ends, what it costs, and what
    `preview_capacity_request` (the submit's own checks) says; None until class and amount
    are chosen."""
    form = CapacityRequestForm(data)
    form.fields["justification"].required = False
    if not form.is_valid():
        return None
    d = form.cleaned_data
    rc = d["resource_class"]
    now = timezone.now()
    hint = {
        "rc": rc,
        "now": now,
        "amount": d["amount"],
        "starts_at": d["starts_at"],
        "ends_at": d["ends_at"],
        "duration": dict(asking.DURATION_CHOICES).get(d["duration"]),
        "cost": asking.cost_estimate(
            price_per_hour=rc.price_per_hour,
            amount=d["amount"],
            starts_at=d["starts_at"] or now,
            ends_at=d["ends_at"],
        ),
    }
    # the ask's monthly cost beside the team's budget and what is left of it (issue 49, 8)
    hint["budget"] = hooks.budget_left(tenant)
    # the class asked, day by day: what is free, granted and booked (issue 52)
    hint["calendars"] = calendars.class_calendars([rc], now=now)
    hint["grace_min"] = team_calendar.grace_minutes()
    names = display.class_names()
    try:
        decision, free = request_services.preview_capacity_request(
            tenant=tenant,
            items={rc.slug: d["amount"]},
            starts_at=d["starts_at"],
            ends_at=d["ends_at"],
        )
    except ServiceError as exc:
        hint["error"] = display.readable(exc.detail, names)
        return hint
    hint.update(
        decision=decision,
        reasons=display.readable_all(decision.reasons, names),
        free=free[rc.slug],
        advice=[
            {
                "workload": a.workload,
                "mode": a.mode,
                "resource_class": names.get(a.resource_class, a.resource_class),
                "reason": a.reason,
            }
            for a in sharing_advice(
                model_key=rc.gpu_model,
                workload=d.get("workload"),
                strict_isolation=d.get("isolation") == "strict",
                offered=selectors.pooled_class_slugs(),
            )
        ],
    )
    return hint


@login_required
def request_preview(request, slug):
    """The form's live hint (htmx): the same checks as the submit, and what the policy does."""
    tenant = _tenant(request, slug)
    return render(request, "tenants/_request_hint.html", {"hint": ask_hint(tenant, request.GET)})


@login_required
def request_detail(request, pk):
    capacity_request = get_object_or_404(
        CapacityRequest.objects.visible_to(request.user)
        .select_related("tenant", "requester", "decided_by")
        .prefetch_related(
            "items__resource_class",
            Prefetch("grants", queryset=QuotaGrant.objects.select_related("resource_class")),
        ),
        pk=pk,
    )
    grant_ids = [str(g.pk) for g in capacity_request.grants.all()]
    timeline = AuditEvent.objects.filter(
        object_type="tenants.CapacityRequest", object_id=str(pk)
    ) | AuditEvent.objects.filter(object_type="tenants.QuotaGrant", object_id__in=grant_ids)
    return render(
        request,
        "tenants/request_detail.html",
        {
            "req": capacity_request,
            "policy_reasons": display.readable_all(
                capacity_request.policy_reasons or [], display.class_names()
            ),
            "timeline": timeline.order_by("created_at", "id"),
            "can_cancel": permissions.can_cancel_now(request.user, capacity_request),
            "can_decide": capacity_request.state == CapacityRequest.State.SUBMITTED
            and is_platform_admin(request.user),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def request_cancel(request, pk):
    capacity_request = get_object_or_404(
        CapacityRequest.objects.visible_to(request.user).select_related("tenant"), pk=pk
    )
    if request.method == "GET":
        return _request_cancel_confirm(request, capacity_request)
    try:
        request_services.cancel_capacity_request(
            actor=request.user, request=capacity_request, comment=request.POST.get("comment", "")
        )
        messages.success(request, f"Request #{pk} cancelled.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("tenants:request_detail", pk=pk)


def _request_cancel_confirm(request, capacity_request: CapacityRequest):
    back = reverse("tenants:request_detail", args=[capacity_request.pk])
    if not permissions.can_cancel_now(request.user, capacity_request):
        messages.error(request, f"Request #{capacity_request.pk} cannot be cancelled now.")
        return redirect(back)
    withdrawing = capacity_request.state == CapacityRequest.State.SUBMITTED
    if withdrawing:
        lines = consequences.withdraw_consequences()
    else:
        quota = {
            line.resource_class.pk: line for line in selectors.quota_lines(capacity_request.tenant)
        }
        lines = []
        for item in capacity_request.items.select_related("resource_class"):
            line = quota.get(item.resource_class_id)
            lines += consequences.give_back_consequences(
                class_name=item.resource_class.display_name,
                amount=item.amount,
                granted=line.granted if line else item.amount,
                in_use=line.in_use if line else 0,
            )
    return confirm_page(
        request,
        title=f"{'Withdraw' if withdrawing else 'Give back'} request #{capacity_request.pk}?",
        consequences=lines,
        action=request.path,
        confirm_label="Withdraw the ask" if withdrawing else "Give capacity back",
        back_url=back,
        back_label=f"Keep request #{capacity_request.pk}",
    )


@login_required
@require_POST
def member_add(request, slug):
    tenant = _tenant(request, slug)
    form = MemberForm(request.POST)
    refusal = None
    if form.is_valid():
        try:
            tenant_services.add_member(actor=request.user, tenant=tenant, **form.cleaned_data)
            messages.success(request, f"{form.cleaned_data['username']} added.")
            return redirect("team_detail", slug=slug)
        except ServiceError as exc:
            if not permissions.can_manage_members(request.user, tenant):
                messages.error(request, exc.detail)  # no form on their page to show it at
                return redirect("team_detail", slug=slug)
            refusal = {
                "field": exc.field if exc.field in form.fields else None,
                "detail": exc.detail,
            }
    request.session[MEMBER_FORM_SESSION_KEY] = {
        "data": {name: request.POST.get(name, "") for name in form.fields},
        "refusal": refusal,
    }
    # no #fragment: Chromium's scroll to it would take the focus that page.js gives the error
    return redirect("team_detail", slug=slug)


def member_form_for(request) -> MemberForm:
    """The team page's "add member" form: empty, or the one just refused, with its errors."""
    saved = request.session.pop(MEMBER_FORM_SESSION_KEY, None)
    if not isinstance(saved, dict):
        return MemberForm()
    form = MemberForm(saved.get("data") or {})
    form.is_valid()
    if refusal := saved.get("refusal"):
        form.add_error(refusal["field"], refusal["detail"])
    return form


def _membership(request, slug, pk) -> Membership:
    tenant = _tenant(request, slug)
    membership = Membership.objects.filter(tenant=tenant, pk=pk).select_related("user").first()
    if membership is None:
        raise Http404("no such member")
    return membership


@login_required
@require_POST
def member_role(request, slug, pk):
    membership = _membership(request, slug, pk)
    form = RoleForm(request.POST)
    try:
        if not form.is_valid():
            raise InvalidInput("choose owner, member or viewer")
        tenant_services.change_member_role(
            actor=request.user, membership=membership, role=form.cleaned_data["role"]
        )
        messages.success(
            request, f"{membership.user.get_username()} is now {form.cleaned_data['role']}."
        )
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("team_detail", slug=slug)


@login_required
@require_http_methods(["GET", "POST"])
def member_remove(request, slug, pk):
    membership = _membership(request, slug, pk)
    if request.method == "GET":
        username = membership.user.get_username()
        if not permissions.can_manage_members(request.user, membership.tenant):
            messages.error(request, "Only the team's owners remove members.")
            return redirect("team_detail", slug=slug)
        try:
            tenant_services.refuse_provider_managed(membership, "remove")
            tenant_services.refuse_last_owner(membership, None)  # asked before, not after
        except ServiceError as exc:
            messages.error(request, exc.detail)
            return redirect("team_detail", slug=slug)
        return confirm_page(
            request,
            title=f"Remove {username} from {membership.tenant.name}?",
            consequences=consequences.member_remove_consequences(
                username=username,
                team=membership.tenant.name,
                is_self=membership.user_id == request.user.pk,
            ),
            action=request.path,
            confirm_label=f"Remove {username}",
            back_url=reverse("team_detail", args=[slug]),
            back_label=f"Keep {username}",
        )
    try:
        tenant_services.remove_member(actor=request.user, membership=membership)
        messages.success(request, f"{membership.user.get_username()} removed.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("team_detail", slug=slug)


def _token_owners(user) -> list[tuple[str, str]]:
    """Who the user may issue tokens for: themself and the robots of teams they own."""
    owners = [(f"user:{user.pk}", f"Me ({user.get_username()})")]
    for tenant in (
        Tenant.objects.visible_to(user)
        .filter(robot__isnull=False)
        .select_related("robot")
        .order_by("slug")
    ):
        if permissions.can_manage_members(user, tenant):
            owners.append((f"user:{tenant.robot_id}", f"CI robot of {tenant.slug}"))
    return owners


@login_required
@never_cache  # the page that shows a new secret is kept by no cache, nor the back button
def tokens(request):
    owners = _token_owners(request.user)
    form = TokenForm(request.POST or None, owners=owners)
    secret = None
    if request.method == "GET" and NEW_TOKEN_SESSION_KEY in request.session:
        secret = sealing.unseal(
            request.session.pop(NEW_TOKEN_SESSION_KEY),
            purpose=NEW_TOKEN_SESSION_KEY,
            max_age_s=NEW_TOKEN_DISPLAY_S,
        )
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        owner = get_user_model().objects.get(pk=int(d["owner"].split(":")[1]))
        try:
            token, secret = token_services.issue_token(
                actor=request.user,
                user=owner,
                name=d["name"],
                scopes=d["scopes"],
                expires_at=timezone.now() + timedelta(days=d["expires_in_days"]),
            )
        except ServiceError as exc:
            _apply_error(form, exc)
        else:
            messages.success(
                request, f"Token {token.prefix}… created: copy it now, it is shown only once."
            )
            # Post/redirect/get: a reload cannot post the form again and create a second token.
            request.session[NEW_TOKEN_SESSION_KEY] = sealing.seal(
                secret, purpose=NEW_TOKEN_SESSION_KEY
            )
            return redirect("tenants:tokens")
    listed = ApiToken.objects.visible_to(request.user).select_related("user")
    return render(
        request, "tenants/tokens.html", {"form": form, "secret": secret, "tokens": listed}
    )


@login_required
@require_http_methods(["GET", "POST"])
def token_revoke(request, pk):
    token = get_object_or_404(ApiToken.objects.visible_to(request.user), pk=pk)
    if request.method == "GET":
        if token.revoked_at:
            messages.info(request, f"Token {token.prefix}… is already revoked.")
            return redirect("tenants:tokens")
        return confirm_page(
            request,
            title=f"Revoke token {token.prefix}… ({token.name})?",
            consequences=consequences.token_revoke_consequences(
                prefix=token.prefix,
                name=token.name,
                last_used_at=token.last_used_at,
                now=timezone.now(),
            ),
            action=request.path,
            confirm_label="Revoke the token",
            back_url=reverse("tenants:tokens"),
            back_label="Keep the token",
        )
    try:
        token_services.revoke_token(actor=request.user, token=token)
        messages.success(request, f"Token {token.prefix}… revoked.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("tenants:tokens")


@login_required
def request_list(request, slug):
    """All of a team's requests, newest first: by state, or only the signed-in user's."""
    tenant = _tenant(request, slug)
    state = request.GET.get("state", "")
    mine = request.GET.get("mine") == "1"
    asks = (
        CapacityRequest.objects.filter(tenant=tenant)
        .select_related("requester", "decided_by")
        .prefetch_related("items__resource_class")
        .order_by("-created_at")
    )
    if state in CapacityRequest.State.values:
        asks = asks.filter(state=state)
    if mine:
        asks = asks.filter(requester=request.user)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "tenants/request_list.html",
        {
            "tenant": tenant,
            "page": Paginator(asks, 25).get_page(request.GET.get("page")),
            "states": CapacityRequest.State.choices,
            "state": state,
            "mine": mine,
            "query": query.urlencode(),
        },
    )
