from django import forms
from django.utils import timezone

from scheduler.catalog.models import ResourceClass
from tenants.models import Membership


class ResourceClassChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ResourceClass) -> str:
        return f"{obj.display_name} · {obj.memory_gb} GB · ${obj.price_per_hour:.2f}/h"


class CapacityRequestForm(forms.Form):
    """What a team asks for; the service validates the rules, the form only parses."""

    resource_class = ResourceClassChoiceField(
        queryset=ResourceClass.objects.filter(active=True).order_by("gpu_model", "kind", "profile"),
        label="GPU model and profile",
        empty_label="Choose what you need",
    )
    amount = forms.IntegerField(min_value=1, initial=1, help_text="How many units")
    ends_at = forms.DateTimeField(
        required=False,
        label="Until",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Leave empty for open-ended (always reviewed by the platform team)",
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

    def clean_ends_at(self):
        value = self.cleaned_data.get("ends_at")
        if value is not None and timezone.is_naive(value):
            value = timezone.make_aware(value)
        return value


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="What uses it, e.g. gitlab-ci")
    owner = forms.ChoiceField(label="For", help_text="You, or the CI robot of a team you own")
    scopes = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        initial=["read"],
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
