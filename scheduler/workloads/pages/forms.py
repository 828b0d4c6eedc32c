"""The browser's submit form: the same fields and checks as the API's submit."""

import shlex

from django import forms
from django.conf import settings
from django.urls import reverse
from django.utils.html import format_html

from catalog import slices
from catalog.models import ResourceClass
from core.errors import ServiceError
from core.forms import RefuseNotCut
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload
from scheduler.workloads.submit.spec import POD_SPEC_FIELDS
from tenants.models import Tenant
from tenants.models.priority_classes import DEFAULT_PRIORITY_CLASS, PRIORITY_CLASS_DEFS
from tenants.selectors import quota_lines

SECRET_KEY_REF = "secretKeyRef:"  # KEY=secretKeyRef:SECRET/KEY in the env box
READ_ONLY_SUFFIX = ":ro"  # CLAIM:/path:ro in the volumes box


class DisplayNameChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ResourceClass) -> str:
        return obj.display_name


class WorkloadForm(RefuseNotCut, forms.Form):
    """The browser's submit form: the same fields as the API, parsed into the same service call."""

    name = forms.CharField(max_length=40, help_text="Lower-case letters, digits and '-'")
    kind = forms.ChoiceField(choices=Workload.Kind.choices)
    image = forms.CharField(max_length=300, initial="pytorch/pytorch:2.4-cuda12.4")
    command = forms.CharField(
        required=False, help_text="As in a shell, e.g. python train.py --epochs 3"
    )
    resource_class = DisplayNameChoiceField(
        queryset=ResourceClass.objects.filter(active=True).order_by("gpu_model", "kind", "profile"),
        label="GPU resource",
        to_field_name="slug",
        empty_label="Choose a GPU resource",
    )
    units = forms.IntegerField(min_value=1, initial=1, label="Units per pod")
    priority = forms.ChoiceField(
        choices=[(pc.name, f"{pc.name} — {pc.description}") for pc in PRIORITY_CLASS_DEFS],
        initial=DEFAULT_PRIORITY_CLASS,
    )
    replicas = forms.IntegerField(
        min_value=1, initial=DEFAULT_REPLICAS, help_text="Deployments only"
    )
    pods = forms.IntegerField(
        required=False,
        min_value=1,
        initial=1,
        help_text="Jobs only: worker pods of this shape, admitted and started together "
        "(distributed training; each gets MASTER_ADDR, WORLD_SIZE, RANK)",
    )
    backoff_limit = forms.IntegerField(
        min_value=0, initial=0, help_text="Jobs only: retries (a gang's, over all its pods)"
    )
    topology = forms.CharField(
        required=False,
        max_length=40,
        help_text="Jobs of 2+ pods: rack-required (all pods in one rack), rack-preferred (as "
        "close as possible), or empty",
    )
    max_replicas = forms.IntegerField(
        required=False,
        min_value=1,
        label="Autoscale up to (replicas)",
        help_text="Deployments only: scale between Replicas and this; quota is held for the "
        "replicas running, and those beyond the grant wait in the queue",
    )
    target_gpu_util = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="Target GPU utilisation (%)"
    )
    target_latency_ms = forms.IntegerField(
        required=False, min_value=1, label="Target request latency (ms, p95)"
    )
    port = forms.IntegerField(
        required=False,
        label="Serves on port",
        help_text="Deployments only: the container's port; a Service inside the cluster in front",
    )
    readiness_path = forms.CharField(
        required=False, max_length=200, help_text="e.g. /ready: in the Service once it answers"
    )
    liveness_path = forms.CharField(
        required=False, max_length=200, help_text="e.g. /healthz: restarted while it fails"
    )
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One KEY=value per line; for a secret, KEY=secretKeyRef:SECRET/KEY reads it "
        "from that key of a Secret in the team's namespace",
    )
    cpu = forms.CharField(
        required=False,
        max_length=32,
        label="CPU",
        help_text="Cores, e.g. 8 or 500m (thousandths); empty: the namespace's default",
    )
    memory = forms.CharField(
        required=False,
        max_length=32,
        help_text="e.g. 64Gi; empty: the namespace's default",
    )
    ephemeral_storage = forms.CharField(
        required=False,
        max_length=32,
        label="Ephemeral storage",
        help_text="Scratch disk per pod, e.g. 100Gi; empty: none asked",
    )
    shm = forms.CharField(
        required=False,
        max_length=32,
        label="Shared memory (/dev/shm)",
        help_text="e.g. 16Gi, for data loaders and NCCL; it counts against Memory",
    )
    volumes = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Existing PersistentVolumeClaims of the team's namespace: one CLAIM:/path per "
        "line, CLAIM:/path:ro to mount it read-only",
    )
    env_from_secrets = forms.CharField(
        required=False,
        label="Secrets as env",
        help_text="Comma-separated Secrets of the team's namespace; each key becomes a variable",
    )
    image_pull_secrets = forms.CharField(
        required=False,
        label="Image pull Secrets",
        help_text="Comma-separated Secrets with the registry's credentials",
    )

    def __init__(self, *args, tenant: Tenant | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if tenant is not None:
            self._offer_allowed_priorities(tenant)
            self._offer_grants_first(tenant)

    def _offer_grants_first(self, tenant: Tenant) -> None:
        """Only what the team can run: its granted classes, with what of each is unused, and
        where quota is counted in slices the other shapes of those models; a link to ask for
        the rest (a class with no grant could only be refused, issue 35, 11)."""
        field = self.fields["resource_class"]
        assert isinstance(field, forms.ModelChoiceField)
        granted = [line for line in quota_lines(tenant) if line.granted]
        mine = [
            (
                line.resource_class.slug,
                f"{line.resource_class.display_name} · {line.free} of {line.granted} unused",
            )
            for line in granted
        ]
        shapes = []
        if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES and granted:
            shapes = [
                (rc.slug, rc.display_name)
                for rc in ResourceClass.objects.filter(
                    active=True,
                    gpu_model__in={line.resource_class.gpu_model for line in granted},
                    pool__capacity__gt=0,  # a shape no node offers could only wait
                )
                .exclude(pk__in=[line.resource_class.pk for line in granted])
                .order_by("gpu_model", "kind", "profile")
            ]
        field.choices = [
            ("", "Choose a GPU resource" if mine else "The team has no quota yet"),
            *([(f"{tenant.name}'s quota", mine)] if mine else []),
            *(
                [("Other shapes of the same GPUs (drawn on the team's slices)", shapes)]
                if shapes
                else []
            ),
        ]
        ask = reverse("tenants:request_create", args=[tenant.slug])
        field.help_text = format_html(
            'Only what the team has quota of. <a href="{}">Ask for capacity</a> for another.',
            ask,
        )

    def _offer_allowed_priorities(self, tenant: Tenant) -> None:
        """Only the classes the team may use are offered (the service refuses the others)."""
        priority = self.fields["priority"]
        assert isinstance(priority, forms.ChoiceField)
        allowed = set(tenant.allowed_priority_classes or [])
        offered = [
            (pc.name, f"{pc.name} — {pc.description}")
            for pc in PRIORITY_CLASS_DEFS
            if pc.name in allowed
        ]
        priority.choices = offered
        if DEFAULT_PRIORITY_CLASS not in allowed and offered:
            priority.initial = offered[-1][0]  # the lowest the team may use

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

    def clean_volumes(self) -> list[dict]:
        """The API's volumes from CLAIM:/path[:ro] lines (admission checks names and paths)."""
        volumes = []
        for number, line in enumerate((self.cleaned_data["volumes"] or "").splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            claim, sep, path = line.partition(":")
            read_only = path.endswith(READ_ONLY_SUFFIX)
            path = path.removesuffix(READ_ONLY_SUFFIX)
            if not sep or not claim.strip() or not path.startswith("/"):
                raise forms.ValidationError(
                    f"line {number}: write CLAIM:/path or CLAIM:/path:ro, e.g. datasets:/data:ro"
                )
            volumes.append({"claim": claim.strip(), "mount_path": path, "read_only": read_only})
        return volumes

    @staticmethod
    def _names(value: str) -> list[str]:
        return [name.strip() for name in (value or "").split(",") if name.strip()]

    def clean_env_from_secrets(self) -> list[str]:
        return self._names(self.cleaned_data["env_from_secrets"])

    def clean_image_pull_secrets(self) -> list[str]:
        return self._names(self.cleaned_data["image_pull_secrets"])

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

    def serving(self) -> dict:
        """The API's `ports` and `probes`, on the one port the form asks for (a path without
        a port is passed on, for the service to say what to change)."""
        d = self.cleaned_data
        port = d.get("port")
        probes = {
            kind: {"path": d[f"{kind}_path"], "port": port}
            for kind in ("readiness", "liveness")
            if d.get(f"{kind}_path")
        }
        return {"ports": [port] if port is not None else [], "probes": probes}

    # The spec's fields (the API's names) that this form names otherwise.
    SPEC_TO_FORM = {
        "resources": "resource_class",
        "priority_class": "priority",
        "autoscaling": "max_replicas",
        "ports": "port",
        "probes": "readiness_path",
    }

    def spec_fields(self) -> dict:
        """The submit's fields as `parse_spec` takes them (the API's names)."""
        d = self.cleaned_data
        return {
            "name": d["name"],
            "kind": d["kind"],
            "image": d["image"],
            "command": d["command"],
            "env": d["env"],
            "resources": {d["resource_class"].slug: d["units"]},
            "priority": d["priority"],
            "replicas": d["replicas"],
            "pods": d.get("pods"),
            "backoff_limit": d["backoff_limit"],
            "topology": d.get("topology") or "",
            "autoscaling": self.autoscaling(),
            **self.serving(),
            **{name: d[name] for name in POD_SPEC_FIELDS},
        }

    def show_refusal(self, exc: ServiceError) -> None:
        """Each refused field's words under the form's own field (on top when it has none)."""
        for field, said in (exc.errors or {"": [exc.detail]}).items():
            name = self.SPEC_TO_FORM.get(field, field)
            for words in said:
                self.add_error(name if name in self.fields else None, words)


def initial_from(workload: Workload) -> dict:
    """The form's fields filled from a workload, for "run again" (the inverse of the parsing
    above: the command quoted as typed, env and volumes one per line)."""
    slug, units = next(iter((workload.resources or {}).items()), ("", 1))
    env_lines = []
    for key, value in (workload.env or {}).items():
        if isinstance(value, dict):
            value = f"{SECRET_KEY_REF}{value.get('secret', '')}/{value.get('key', '')}"
        env_lines.append(f"{key}={value}")
    return {
        "name": workload.name,
        "kind": workload.kind,
        "image": workload.image,
        "command": shlex.join([*(workload.command or []), *(workload.args or [])]),
        "resource_class": slug,
        "units": units,
        "priority": workload.priority_class,
        "replicas": workload.replicas if workload.kind == Workload.Kind.DEPLOYMENT else 1,
        "pods": workload.replicas if workload.kind == Workload.Kind.JOB else 1,
        "topology": workload.topology,
        "backoff_limit": workload.backoff_limit,
        "max_replicas": workload.max_replicas,
        "target_gpu_util": workload.target_gpu_util,
        "target_latency_ms": workload.target_latency_ms,
        "port": (workload.ports or [{}])[0].get("port"),
        "readiness_path": (workload.probes or {}).get("readiness", {}).get("path", ""),
        "liveness_path": (workload.probes or {}).get("liveness", {}).get("path", ""),
        "env": "\n".join(env_lines),
        "cpu": workload.cpu,
        "memory": workload.memory,
        "ephemeral_storage": workload.ephemeral_storage,
        "shm": workload.shm,
        "volumes": "\n".join(
            f"{v['claim']}:{v['mount_path']}{READ_ONLY_SUFFIX if v.get('read_only') else ''}"
            for v in workload.volumes or []
        ),
        "env_from_secrets": ", ".join(workload.env_from_secrets or []),
        "image_pull_secrets": ", ".join(workload.image_pull_secrets or []),
    }
