"""Browser self-service for teams. Views parse input, call one service, render; every object is
fetched through `visible_to(user)`, so another tenant's pages are 404."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.errors import InvalidInput, ServiceError
from scheduler.catalog.advice import sharing_advice
from tenants import permissions, selectors, services
from tenants.forms import CapacityRequestForm, MemberForm, RoleForm, TokenForm
from tenants.models import ApiToken, AuditEvent, CapacityRequest, Membership, QuotaGrant, Tenant


def _tenant(request, slug: str) -> Tenant:
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


def _apply_error(form, exc: ServiceError, field_map: dict[str, str] | None = None) -> None:
    """Put a service's refusal next to the field it is about (or on top of the form)."""
    field = (field_map or {}).get(exc.field or "", exc.field)
    form.add_error(field if field in form.fields else None, exc.detail)


@login_required
def request_create(request, slug):
    tenant = _tenant(request, slug)
    form = CapacityRequestForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created = services.submit_capacity_request(
                actor=request.user,
                tenant=tenant,
                items={data["resource_class"].slug: data["amount"]},
                ends_at=data["ends_at"],
                justification=data["justification"],
            )
        except ServiceError as exc:
            _apply_error(form, exc, {"items": "amount", "starts_at": "ends_at"})
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
            "pools": selectors.pool_summary(),
        },
    )


@login_required
def request_preview(request, slug):
    """The form's live hint (htmx): what is free and what the policy will do."""
    tenant = _tenant(request, slug)
    form = CapacityRequestForm(request.GET)
    form.fields["justification"].required = False
    hint = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            decision, free = services.preview_capacity_request(
                tenant=tenant,
                items={data["resource_class"].slug: data["amount"]},
                ends_at=data["ends_at"],
            )
            hint = {
                "decision": decision,
                "free": free[data["resource_class"].slug],
                "amount": data["amount"],
                "rc": data["resource_class"],
                "advice": sharing_advice(
                    model_key=data["resource_class"].gpu_model,
                    workload=request.GET.get("workload"),
                    strict_isolation=request.GET.get("isolation") == "strict",
                ),
            }
        except ServiceError as exc:
            hint = {"error": exc.detail}
    return render(request, "tenants/_request_hint.html", {"hint": hint, "form": form})


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
            "timeline": timeline.order_by("created_at", "id"),
            "can_cancel": capacity_request.can("cancel")
            and permissions.can_cancel(request.user, capacity_request),
        },
    )


@login_required
@require_POST
def request_cancel(request, pk):
    capacity_request = get_object_or_404(CapacityRequest.objects.visible_to(request.user), pk=pk)
    try:
        services.cancel_capacity_request(
            actor=request.user, request=capacity_request, comment=request.POST.get("comment", "")
        )
        messages.success(request, f"Request #{pk} cancelled.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("tenants:request_detail", pk=pk)


@login_required
@require_POST
def member_add(request, slug):
    tenant = _tenant(request, slug)
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            services.add_member(actor=request.user, tenant=tenant, **form.cleaned_data)
            messages.success(request, f"{form.cleaned_data['username']} added.")
        except ServiceError as exc:
            messages.error(request, exc.detail)
    else:
        messages.error(request, "Give a username and a role.")
    return redirect("team_detail", slug=slug)


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
        services.change_member_role(
            actor=request.user, membership=membership, role=form.cleaned_data["role"]
        )
        messages.success(
            request, f"{membership.user.get_username()} is now {form.cleaned_data['role']}."
        )
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("team_detail", slug=slug)


@login_required
@require_POST
def member_remove(request, slug, pk):
    membership = _membership(request, slug, pk)
    try:
        services.remove_member(actor=request.user, membership=membership)
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
def tokens(request):
    owners = _token_owners(request.user)
    form = TokenForm(request.POST or None, owners=owners)
    secret = None
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        owner = get_user_model().objects.get(pk=int(d["owner"].split(":")[1]))
        try:
            token, secret = services.issue_token(
                actor=request.user,
                user=owner,
                name=d["name"],
                scopes=d["scopes"],
                expires_at=timezone.now() + timedelta(days=d["expires_in_days"]),
            )
            messages.success(
                request, f"Token {token.prefix}… created: copy it now, it is shown only once."
            )
            form = TokenForm(owners=owners)
        except ServiceError as exc:
            _apply_error(form, exc)
    listed = ApiToken.objects.visible_to(request.user).select_related("user")
    return render(
        request, "tenants/tokens.html", {"form": form, "secret": secret, "tokens": listed}
    )


@login_required
@require_POST
def token_revoke(request, pk):
    token = get_object_or_404(ApiToken.objects.visible_to(request.user), pk=pk)
    try:
        services.revoke_token(actor=request.user, token=token)
        messages.success(request, f"Token {token.prefix}… revoked.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("tenants:tokens")
