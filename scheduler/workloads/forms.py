import shlex

from django import forms

from scheduler.catalog.models import ResourceClass
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload
from tenants.models import DEFAULT_PRIORITY_CLASS, PRIORITY_CLASSES

SECRET_KEY_REF = "secretKeyRef:"  # KEY=secretKeyRef:SECRET/KEY in the env box


class WorkloadForm(forms.Form):
    """The browser's submit form: the same fields as the API, parsed into the same service call."""

    name = forms.CharField(max_length=40, help_text="Lower-case letters, digits and '-'")
    kind = forms.ChoiceField(choices=Workload.Kind.choices)
    image = forms.CharField(max_length=300, initial="pytorch/pytorch:2.4-cuda12.4")
    command = forms.CharField(
        required=False, help_text="As in a shell, e.g. python train.py --epochs 3"
    )
    resource_class = forms.ModelChoiceField(
        queryset=ResourceClass.objects.filter(active=True),
        label="GPU resource",
        to_field_name="slug",
    )
    units = forms.IntegerField(min_value=1, initial=1, label="Units per pod")
    priority = forms.ChoiceField(
        choices=[(p, p) for p in PRIORITY_CLASSES], initial=DEFAULT_PRIORITY_CLASS
    )
    replicas = forms.IntegerField(
        min_value=1, initial=DEFAULT_REPLICAS, help_text="Deployments only"
    )
    backoff_limit = forms.IntegerField(min_value=0, initial=0, help_text="Jobs only: retries")
    max_replicas = forms.IntegerField(
        required=False,
        min_value=1,
        label="Autoscale up to (replicas)",
        help_text="Deployments only: scale between Replicas and this; quota is held for the most",
    )
    target_gpu_util = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="Target GPU utilisation (%)"
    )
    target_latency_ms = forms.IntegerField(
        required=False, min_value=1, label="Target request latency (ms, p95)"
    )
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One KEY=value per line; for a secret, KEY=secretKeyRef:SECRET/KEY reads it "
        "from that key of a Secret in the team's namespace",
    )

    def clean_command(self):
        try:
            return shlex.split(self.cleaned_data["command"] or "")
        except ValueError as exc:
            raise forms.ValidationError(f"cannot read the command: {exc}") from None

    def clean_env(self):
        env = {}
        for number, line in enumerate((self.cleaned_data["env"] or "").splitlines(), 1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(f"line {number}: write KEY=value")
            env[key.strip()] = self._env_value(number, value)
        return env

    @staticmethod
    def _env_value(number: int, value: str) -> str | dict[str, str]:
        """A plain value, or the API's Secret reference for `secretKeyRef:SECRET/KEY`."""
        ref = value.strip()
        if not ref.startswith(SECRET_KEY_REF):
            return value
        secret, slash, key = ref.removeprefix(SECRET_KEY_REF).partition("/")
        if not slash:
            raise forms.ValidationError(
                f"line {number}: write KEY={SECRET_KEY_REF}SECRET/KEY, e.g. "
                f"AWS_SECRET_ACCESS_KEY={SECRET_KEY_REF}s3-creds/secret-key"
            )
        return {"secret": secret, "key": key}

    def autoscaling(self) -> dict | None:
        """The API's `autoscaling` object, when the form asks for one."""
        d = self.cleaned_data
        if not d.get("max_replicas"):
            return None
        ask = {"min_replicas": d["replicas"], "max_replicas": d["max_replicas"]}
        for name in ("target_gpu_util", "target_latency_ms"):
            if d.get(name):
                ask[name] = d[name]
        return ask
