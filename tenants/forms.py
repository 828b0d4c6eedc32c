import json
from datetime import datetime

from django import forms
from django.core.validators import ProhibitNullCharactersValidator
from django.utils import timezone

from catalog.models import ResourceClass
from core.filters import UTCDateTimeField
from core.forms import RefuseNotCut
from tenants import asking
from tenants.models import Membership, NotificationChannel
from tenants.notifications.events import EVENTS


class ResourceClassChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ResourceClass) -> str:
        return f"{obj.display_name} · {obj.memory_gb} GB · ${obj.price_per_hour:.2f}/h"


class CapacityRequestForm(forms.Form):
    """What a team asks for; the service validates the rules, the form only parses."""

    resource_class = ResourceClassChoiceField(
        # only what a pool has: a class with no capacity can never be granted (issue 35, 11)
        queryset=ResourceClass.objects.filter(active=True, pool__capacity__gt=0).order_by(
            "gpu_model", "kind", "profile"
        ),
        label="GPU model and profile",
        empty_label="Choose what you need",
    )
    amount = forms.IntegerField(min_value=1, initial=1, help_text="How many units")
    duration = forms.ChoiceField(
        required=False,
        label="For how long",
        choices=asking.DURATION_CHOICES,
        initial=asking.OPEN_ENDED,
        widget=forms.RadioSelect,
        help_text="The hint below shows when it ends",
    )
    starts_at = forms.DateTimeField(
        required=False,
        label="Starts at",  # the time zone is added in __init__
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Empty: now. A later start books the units ahead",
    )
    ends_at = forms.DateTimeField(
        required=False,
        label="Ends at",  # the time zone is added in __init__
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Only with “Until a date”",
    )
    workload = forms.ChoiceField(
        required=False,
        label="What will run",
        choices=[("", "Not sure"), ("inference", "Inference"), ("training", "Training")],
        help_text="Only for the sharing advice below",
    )
    isolation = forms.ChoiceField(
        required=False,
        label="Isolation",
        choices=[("", "Shared is fine"), ("strict", "Strict (no neighbours on the GPU)")],
        help_text="Strict isolation means MIG or whole GPUs only",
    )
    justification = forms.CharField(
        label="Why",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the team will run, so the platform team can decide quickly",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        self.fields["ends_at"].label = f"Ends at ({zone})"
        self.fields["starts_at"].label = f"Starts at ({zone})"

    def clean_ends_at(self):
        value = self.cleaned_data.get("ends_at")
        if value is not None and timezone.is_naive(value):
            value = timezone.make_aware(value)
        return value

    def clean_starts_at(self):
        value = self.cleaned_data.get("starts_at")
        if value is not None and timezone.is_naive(value):
            value = timezone.make_aware(value)
        return value

    def clean(self):
        """`ends_at` from the chosen duration, counted from the start (a date alone, as the API
        sends, means "until that date"); the service judges the window, for the preview and
        the submit alike."""
        data = super().clean()
        duration = data.get("duration") or (
            asking.CUSTOM if data.get("ends_at") else asking.OPEN_ENDED
        )
        if duration == asking.CUSTOM and not data.get("ends_at") and "ends_at" not in self.errors:
            self.add_error("ends_at", "give the date and time it ends, or choose a duration")
        data["duration"] = duration
        data["ends_at"] = asking.ends_at_for(
            duration, now=data.get("starts_at") or timezone.now(), custom=data.get("ends_at")
        )
        return data


class MemberForm(RefuseNotCut, forms.Form):
    username = forms.CharField(max_length=150)
    # The least surprising default: a new member is not made an owner by one careless click.
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


class TokenForm(RefuseNotCut, forms.Form):
    name = forms.CharField(
        max_length=80,
        help_text="What uses it, e.g. gitlab-ci (at most 80 characters)",
        error_messages={
            "max_length": "A token's name may be at most %(limit_value)d characters; this one "
            "has %(show_value)d. Shorten it: nothing is cut for you."
        },
    )
    owner = forms.ChoiceField(label="For", help_text="You, or the CI robot of a team you own")
    scopes = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        initial=["read"],
        # none ticked is no token: it would be `read` only by a guess
        error_messages={
            "required": "Tick at least one scope: read to look, request to ask for capacity, "
            "submit to run workloads."
        },
        choices=[
            ("read", "read"),
            ("request", "request"),
            ("submit", "submit"),
            ("approve", "approve (platform admins)"),
        ],
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=366, initial=30, label="Expires in (days)"
    )

    def __init__(self, *args, owners: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        owner = self.fields["owner"]
        assert isinstance(owner, forms.ChoiceField)
        owner.choices = owners


class GrantExtendForm(RefuseNotCut, forms.Form):
    """A grant's new end, and why; the renewal service judges the date (after the grant's end,
    within its class's longest grant), this form only parses it and keeps what was typed."""

    ends_at = UTCDateTimeField(
        label="New end",  # the time zone is added in __init__
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        error_messages={"required": "Say until when the grant should be extended."},
    )
    justification = forms.CharField(
        label="Why (optional)",
        required=False,
        max_length=500,
        help_text="What the team still runs, so the platform team can decide quickly",
    )

    def __init__(self, *args, latest: datetime | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        ends_at = self.fields["ends_at"]
        ends_at.label = f"New end ({timezone.get_current_timezone_name()})"
        if latest is not None:
            shown = timezone.localtime(latest)
            ends_at.help_text = (
                f"At the latest {shown:%-d %b %Y %H:%M}: the longest this class is granted"
            )
            ends_at.widget.attrs["max"] = f"{shown:%Y-%m-%dT%H:%M}"
        # a NUL is the service's to refuse: it names the character and what to do
        justification = self.fields["justification"]
        justification.validators = [
            v
            for v in justification.validators
            if not isinstance(v, ProhibitNullCharactersValidator)
        ]


# What an address looks like for each kind of channel, shown in the empty field (page.js swaps
# it when the kind changes).
CHANNEL_PLACEHOLDERS = {
    NotificationChannel.Kind.EMAIL: "ops@example.com, oncall@example.com",
    NotificationChannel.Kind.WEBHOOK: "https://hooks.example.com/gpu-portal",
    NotificationChannel.Kind.SLACK: "https://chat.example.com/hooks/…",
}


def event_choices() -> list[tuple[str, str]]:
    """Events by what they mean, in the order people read them."""
    return [(e.name, e.description) for e in sorted(EVENTS.values(), key=lambda e: e.name)]


class _ServiceJudgedText(forms.CharField):
    """Text the channel service judges (control characters, length), so its words are shown."""

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)
        ]


class ChannelForm(forms.Form):
    """A notification channel as typed: the service judges it; a refusal comes back at its
    field with what was typed kept."""

    kind = forms.ChoiceField(choices=NotificationChannel.Kind.choices)
    name = _ServiceJudgedText(help_text="Who reads it, e.g. ml-oncall")
    target = _ServiceJudgedText(
        label="Address", help_text="E-mail addresses (comma-separated) or the URL"
    )
    events = forms.MultipleChoiceField(
        required=False,
        label="Events (none ticked: the default)",
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        events = self.fields["events"]
        assert isinstance(events, forms.MultipleChoiceField)
        events.choices = event_choices()
        kind = self["kind"].value() or NotificationChannel.Kind.EMAIL
        self.fields["target"].widget.attrs["placeholder"] = CHANNEL_PLACEHOLDERS.get(
            kind, CHANNEL_PLACEHOLDERS[NotificationChannel.Kind.WEBHOOK]
        )
        self.fields["kind"].widget.attrs["data-placeholders"] = json.dumps(
            {str(k): v for k, v in CHANNEL_PLACEHOLDERS.items()}
        )
