"""The browser's submit form: the same fields and checks as the API's submit."""

import shlex

from django import forms
from django.urls import reverse
from django.utils.html import format_html

from catalog.models import ResourceClass
from core.errors import InvalidInput, QuotaExceeded, ServiceError
from core.forms import RefuseNotCut
from scheduler.workloads.kinds.serving import MIN_TARGET_REQUESTS_PER_S
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload
from scheduler.workloads.pages.choices import gpu_choices
from scheduler.workloads.submit import admission
from scheduler.workloads.submit.spec import POD_SPEC_FIELDS, parse_spec
from tenants.models import Tenant
from tenants.models.priority_classes import DEFAULT_PRIORITY_CLASS, PRIORITY_CLASS_DEFS

SECRET_KEY_REF = "secretKeyRef:"  # KEY=secretKeyRef:SECRET/KEY in the env box
READ_ONLY_SUFFIX = ":ro"  # CLAIM:/path:ro in the volumes box


class DisplayNameChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ResourceClass) -> str:
        return obj.display_name


class WorkloadForm(RefuseNotCut, forms.Form):
    """The browser's submit form: the same fields as the API, parsed into the same service call."""

    name = forms.CharField(max_length=40, help_text="Lower-case letters, digits and '-'")
    kind = forms.ChoiceField(
        choices=Workload.Kind.choices,
        initial=Workload.Kind.JOB,
        widget=forms.RadioSelect,
        help_text="Only the chosen kind's fields below are used",
    )
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
    replicas = forms.IntegerField(min_value=1, initial=DEFAULT_REPLICAS)
    pods = forms.IntegerField(
        required=False,
        min_value=1,
        initial=1,
        help_text="Worker pods of this shape, admitted and started together "
        "(distributed training; each gets MASTER_ADDR, WORLD_SIZE, RANK)",
    )
    backoff_limit = forms.IntegerField(
        min_value=0, initial=0, help_text="Retries (a gang's, over all its pods)"
    )
    topology = forms.CharField(
        required=False,
        max_length=40,
        help_text="For 2 pods or more: rack-required (all pods in one rack), rack-preferred (as "
        "close as possible), or empty",
    )
    max_replicas = forms.IntegerField(
        required=False,
        min_value=1,
        label="Autoscale up to (replicas)",
        help_text="Scale between Replicas and this; quota is held for the "
        "replicas running, and those beyond the grant wait in the queue",
    )
    target_gpu_util = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="Target GPU utilisation (%)"
    )
    target_latency_ms = forms.IntegerField(
        required=False, min_value=1, label="Target request latency (ms, p95)"
    )
    target_requests_per_s = forms.DecimalField(
        required=False,
        min_value=MIN_TARGET_REQUESTS_PER_S,
        max_digits=9,
        decimal_places=3,
        label="Target requests per second (per replica)",
        help_text="The load each replica should carry, from its request counter, e.g. 5",
    )
    port = forms.IntegerField(
        required=False,
        label="Serves on port",
        help_text="The container's port; a Service inside the cluster in front",
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
        """Only what the team can run (`gpu_choices`), a link to ask for the rest (a class
        with no grant could only be refused, issue 35, 11)."""
        field = self.fields["resource_class"]
        assert isinstance(field, forms.ModelChoiceField)
        groups = gpu_choices(tenant)
        field.choices = [
            ("", "Choose a GPU resource" if groups else "The team has no quota yet"),
            *groups,
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
        for name in ("target_gpu_util", "target_latency_ms", "target_requests_per_s"):
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

    # The fields of one kind: shown only when it is chosen, ignored by the server otherwise.
    KIND_FIELDS = {
        Workload.Kind.JOB: ("pods", "backoff_limit", "topology"),
        Workload.Kind.DEPLOYMENT: (
            "replicas",
            "max_replicas",
            "target_gpu_util",
            "target_latency_ms",
            "target_requests_per_s",
            "port",
            "readiness_path",
            "liveness_path",
        ),
    }
    POD_FIELDS = ("env", *POD_SPEC_FIELDS)

    def groups(self) -> dict[str, list]:
        """The bound fields by fieldset: what every workload has, each kind's own, the pod's."""
        own = {name for names in self.KIND_FIELDS.values() for name in names}
        return {
            "common": [self[n] for n in self.fields if n not in own and n not in self.POD_FIELDS],
            **{kind: [self[n] for n in names] for kind, names in self.KIND_FIELDS.items()},
            "pod": [self[n] for n in self.POD_FIELDS],
        }

    def pod_fields_used(self) -> bool:
        """The pod's fieldset opens when one of its fields is filled or refused."""
        return any(self[n].errors or self[n].value() for n in self.POD_FIELDS)

    def chosen_kind(self) -> str:
        kind = self.cleaned_data.get("kind") if hasattr(self, "cleaned_data") else None
        return kind or str(self["kind"].value() or Workload.Kind.JOB)

    def clean(self):
        """Ignore the other kind's fields (shown without CSS, or typed before switching),
        then the spec's checks on every field that is still clean: one round of errors."""
        data = super().clean()
        kind = self.chosen_kind()
        for other, names in self.KIND_FIELDS.items():
            if other == kind:
                continue
            for name in names:
                self._errors.pop(name, None)
                data[name] = self.fields[name].initial if name in ("replicas", "pods") else None
        self.spec = None
        try:
            self.spec = parse_spec(self.spec_fields())
        except ServiceError as exc:
            self.show_refusal(exc, keep_earlier=True)
        return data

    # The spec's fields (the API's names) that this form names otherwise.
    SPEC_TO_FORM = {
        "resources": "resource_class",
        "priority_class": "priority",
        "autoscaling": "max_replicas",
        "ports": "port",
        "probes": "readiness_path",
    }

    def spec_fields(self) -> dict:
        """The submit's fields as `parse_spec` takes them (the API's names); a field the form
        refused already is left out (its check would only say it again). The other kind's
        fields are not passed: a job has no replicas, ports or autoscaling."""
        d = self.cleaned_data
        job = self.chosen_kind() == Workload.Kind.JOB
        rc, units = d.get("resource_class"), d.get("units")
        fields = {
            "name": d.get("name"),
            "kind": d.get("kind"),
            "image": d.get("image"),
            "command": d.get("command"),
            "env": d.get("env"),
            "resources": {rc.slug: units} if rc and units else None,
            "priority": d.get("priority"),
            "replicas": DEFAULT_REPLICAS if job else d.get("replicas"),
            "pods": (d.get("pods") or 1) if job else None,
            "backoff_limit": (d.get("backoff_limit") or 0) if job else 0,
            "topology": (d.get("topology") or "") if job else "",
            "autoscaling": None if job else self.autoscaling(),
            **({"ports": [], "probes": {}} if job else self.serving()),
            **{name: d.get(name) for name in POD_SPEC_FIELDS},
        }
        if "resource_class" in self.errors or "units" in self.errors:
            fields.pop("resources")
        return {k: v for k, v in fields.items() if k in ("kind",) or k not in self.errors}

    def ask(self) -> admission.Ask:
        """What admission weighs, from what is clean (None where a field was refused)."""
        d = self.cleaned_data
        if self.spec is not None:
            return admission.Ask.of(self.spec)
        kind = d.get("kind")
        job = kind == Workload.Kind.JOB
        rc, units = d.get("resource_class"), d.get("units")
        size_field = "pods" if job else "replicas"
        pods = d.get(size_field) or (1 if job else None)
        return admission.Ask(
            kind=kind,
            resources={rc.slug: units} if rc and units else None,
            pods=pods if size_field not in self.errors else None,
            priority=d.get("priority") if "priority" not in self.errors else None,
            name=d.get("name") if "name" not in self.errors else None,
            topology=(d.get("topology") or "") if job else "",
            autoscaled=not job and bool(d.get("max_replicas")),
        )

    def form_field(self, field: str, exc: ServiceError) -> str | None:
        """The form's field a refusal of the spec's `field` belongs at: "can never fit" is
        about the units (or the autoscaling range, a gang's pods), not the class chosen."""
        if field == "resources" and isinstance(exc, QuotaExceeded):
            return "units"
        if field == "replicas" and self.chosen_kind() == Workload.Kind.JOB:
            return "pods"
        name = self.SPEC_TO_FORM.get(field, field)
        return name if name in self.fields else None

    def show_refusal(self, exc: ServiceError, *, keep_earlier: bool = False) -> None:
        """Each refused field's words under the form's own field (on top when it has none).
        `keep_earlier`: a field the form refused already keeps only its first words."""
        parts = exc.refused or [(exc.field or "", exc)]
        if not exc.refused and len(exc.errors) > 1:  # of_fields without the refusals
            parts = [(f, InvalidInput(w, field=f)) for f, said in exc.errors.items() for w in said]
        self.show_refusal_list(parts, keep_earlier=keep_earlier)

    def show_refusal_list(
        self, parts: list[tuple[str, ServiceError]], *, keep_earlier: bool = True
    ) -> None:
        already = set(self.errors) if keep_earlier else set()
        for field, refusal in parts:
            name = self.form_field(field, refusal) if field else None
            if name in already:
                continue
            self.add_error(name, refusal.detail)


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
        "target_requests_per_s": workload.target_requests_per_s,
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
