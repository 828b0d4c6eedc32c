"""The platform team's console on the Django admin. Actions call the same services as the web
pages and the API, so the three faces cannot disagree."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from catalog import idle_policy
from core.admin import ReadOnlyAdmin, ReadOnlyMixin, ServiceAdmin, run_each
from tenants.models import (
    ApiToken,
    AuditEvent,
    AutoApprovalRule,
    CapacityRequest,
    CapacityRequestItem,
    Membership,
    NotificationChannel,
    NotificationDelivery,
    QuotaGrant,
    Tenant,
)
from tenants.services import approvals as approval_services
from tenants.services import grants as grant_services
from tenants.services import policy_rules
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services


class MembershipInline(ReadOnlyMixin, admin.TabularInline):
    """Shown, never edited here: members are added, re-roled and removed on the team's page or
    through the API, whose services check the last owner, write the audit event and reconcile
    the namespace's RoleBindings. An inline would save rows past all three."""

    model = Membership
    extra = 0
    fields = readonly_fields = ("user", "role", "created_at")
    can_delete = False
    verbose_name_plural = "members (read-only here: manage them on the team's page or the API)"


@admin.register(Tenant)
class TenantAdmin(ServiceAdmin):
    list_display = [
        "slug",
        "name",
        "status",
        "sync",
        "cost_centre",
        "gpu_ceiling",
        "monthly_budget",
    ]
    list_select_related = ["sync_state"]
    list_filter = ["status"]
    search_fields = ["slug", "name", "cost_centre"]
    # department: set through the department services (its quota must hold the team's grants)
    readonly_fields = ["robot", "created_at", "status", "team_page", "department"]
    inlines = [MembershipInline]
    actions = ["suspend", "resume", "archive"]

    @admin.display(description="cluster")
    def sync(self, obj):
        state = getattr(obj, "sync_state", None)
        return state.summary if state else "not synced yet"

    @admin.display(description="members")
    def team_page(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return format_html(
            '<a href="{}">Manage members on the team\'s page</a>',
            reverse("team_detail", kwargs={"slug": obj.slug}),
        )

    def get_readonly_fields(self, request, obj=None):
        # The slug names the namespace: it never changes once the tenant exists.
        return [*self.readonly_fields, "slug"] if obj else self.readonly_fields

    def get_exclude(self, request, obj=None):
        # A new team starts with no idle policy of its own (the pools' apply): it is set once
        # the team exists, through update_tenant, which checks it as a whole.
        return [] if obj else list(idle_policy.FIELDS)

    @admin.action(description="Suspend selected tenants")
    def suspend(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Suspended",
            lambda t: tenant_services.change_tenant_status(
                actor=request.user, tenant=t, action="suspend"
            ),
        )

    @admin.action(description="Resume selected tenants")
    def resume(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Resumed",
            lambda t: tenant_services.change_tenant_status(
                actor=request.user, tenant=t, action="resume"
            ),
        )

    @admin.action(description="Archive selected tenants (ends their grants)")
    def archive(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Archived",
            lambda t: tenant_services.change_tenant_status(
                actor=request.user, tenant=t, action="archive"
            ),
        )

    def save_model(self, request, obj, form, change):
        if change:
            editable = [f for f in form.changed_data if f in tenant_services.EDITABLE_TENANT_FIELDS]
            if editable:
                tenant_services.update_tenant(
                    actor=request.user, tenant=obj, **{f: getattr(obj, f) for f in editable}
                )
            return
        created = tenant_services.create_tenant(
            actor=request.user,
            slug=obj.slug,
            name=obj.name,
            cost_centre=obj.cost_centre,
            gpu_ceiling=obj.gpu_ceiling,
            monthly_budget=obj.monthly_budget,
            allowed_priority_classes=obj.allowed_priority_classes or None,
        )
        obj.pk = created.pk
        obj.refresh_from_db()


class CapacityRequestItemInline(admin.TabularInline):
    model = CapacityRequestItem
    extra = 0
    readonly_fields = ["resource_class", "amount"]
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(CapacityRequest)
class CapacityRequestAdmin(ServiceAdmin):
    """The approval queue: filter by state 'submitted', select, approve or reject."""

    list_display = [
        "id",
        "tenant",
        "requester",
        "state",
        "asked",
        "starts_at",
        "ends_at",
        "auto_approved",
        "created_at",
    ]
    list_filter = ["state", "auto_approved", "tenant"]
    search_fields = ["tenant__slug", "requester__username", "justification"]
    readonly_fields = [f.name for f in CapacityRequest._meta.fields]
    inlines = [CapacityRequestItemInline]
    actions = ["approve", "reject"]
    list_select_related = ["tenant", "requester"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("items__resource_class")

    @admin.display(description="asked")
    def asked(self, obj):
        return ", ".join(f"{i.amount} × {i.resource_class.slug}" for i in obj.items.all())

    def has_add_permission(self, request):
        return False  # asks come from teams, through the portal or the API

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Approve selected requests")
    def approve(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Approved",
            lambda r: approval_services.approve_capacity_request(
                actor=request.user, request=r, comment="approved in the admin console"
            ),
        )

    @admin.action(description="Reject selected requests")
    def reject(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Rejected",
            lambda r: request_services.reject_capacity_request(
                actor=request.user, request=r, comment="rejected in the admin console"
            ),
        )


@admin.register(QuotaGrant)
class QuotaGrantAdmin(ServiceAdmin):
    list_display = ["id", "tenant", "resource_class", "amount", "state", "starts_at", "ends_at"]
    list_filter = ["state", "resource_class", "tenant"]
    readonly_fields = [f.name for f in QuotaGrant._meta.fields]
    actions = ["revoke"]
    list_select_related = ["tenant", "resource_class"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke selected grants")
    def revoke(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Revoked",
            lambda g: grant_services.revoke_grant(
                actor=request.user, grant=g, comment="revoked in the admin console"
            ),
        )


@admin.register(AutoApprovalRule)
class AutoApprovalRuleAdmin(ServiceAdmin):
    list_display = ["resource_class", "max_amount", "max_duration_hours"]

    def save_model(self, request, obj, form, change):
        policy_rules.set_auto_approval_rule(
            actor=request.user,
            resource_class=obj.resource_class,
            max_amount=obj.max_amount,
            max_duration_hours=obj.max_duration_hours,
        )


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Read-only: the audit log is append-only, even for superusers."""

    list_display = ["created_at", "actor_repr", "verb", "object_repr", "tenant", "request_id"]
    list_filter = ["verb", "object_type", "tenant"]
    search_fields = ["actor_repr", "object_repr", "request_id", "verb"]
    date_hierarchy = "created_at"


@admin.register(NotificationChannel)
class NotificationChannelAdmin(ReadOnlyAdmin):
    """Shown here; added and removed on the team's or the platform's Notifications page or by
    API, whose service checks the receiver's address and shows a webhook's secret once."""

    list_display = ["name", "kind", "tenant", "shown_target", "active", "created_at"]
    list_filter = ["kind", "active"]
    search_fields = ["name", "tenant__slug"]
    exclude = ["secret_encrypted", "target"]  # the signing key; a Slack URL is a credential
    readonly_fields = ["shown_target"]


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: what was sent where, how often it was tried and why it failed."""

    list_display = ["created_at", "event", "tenant", "channel", "state", "attempts", "sent_at"]
    list_filter = ["state", "event"]
    search_fields = ["event", "subject", "tenant__slug", "channel__name"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant", "channel__tenant"]


class ApiTokenAddForm(forms.ModelForm):
    """Issue a token here as in the browser and the CLI; the secret is shown once."""

    expires_in_days = forms.IntegerField(min_value=1, max_value=366, initial=30)
    scopes = forms.MultipleChoiceField(
        choices=ApiToken.Scope.choices, widget=forms.CheckboxSelectMultiple, initial=["read"]
    )

    class Meta:
        model = ApiToken
        fields = ["user", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(ServiceAdmin):
    list_display = ["prefix", "name", "user", "scopes", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "name", "user__username"]
    autocomplete_fields = ["user"]
    actions = ["revoke"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in ApiToken._meta.fields] if obj else []

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the audit log keeps what a token did

    def save_model(self, request, obj, form, change):
        if change:
            return
        d = form.cleaned_data
        token, secret = token_services.issue_token(
            actor=request.user,
            user=d["user"],
            name=d["name"],
            scopes=d["scopes"],
            expires_at=timezone.now() + timedelta(days=d["expires_in_days"]),
        )
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(
            request,
            f"Token for {token.user}: {secret} — copy it now, it is shown only once.",
            messages.WARNING,
        )

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Revoked",
            lambda t: token_services.revoke_token(actor=request.user, token=t),
        )


from tenants import department_admin  # noqa: E402,F401 - registers the departments' admin
