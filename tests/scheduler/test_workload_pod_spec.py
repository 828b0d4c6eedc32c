"""What a workload asks of its pod besides GPUs (issue 15): cpu, memory, ephemeral storage,
shared memory, volumes and Secrets. Quantities, the pure manifest, the input checks and
admission (stored, audited, rendered from the database)."""

from dataclasses import replace
from decimal import Decimal

import pytest

from core.errors import InvalidInput, QuotaExceeded
from core.quantities import BadQuantity, parse_quantity
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.from_row import spec_for
from scheduler.workloads.kinds.pod_template import SHM_MOUNT_PATH, ClaimMount, render_pod_template
from scheduler.workloads.submit import input as workload_input
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import AuditEvent
from tenants.services.grants import grant_quota
from tests.scheduler.test_workloads import SPEC

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


# --- quantities -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Decimal(8)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("64Gi", Decimal(64 * 1024**3)),
        ("100G", Decimal(100 * 10**9)),
        ("512Mi", Decimal(512 * 1024**2)),
        ("1e3", Decimal(1000)),
        ("2E-3", Decimal("0.002")),
        (".5", Decimal("0.5")),
    ],
)
def test_a_quantity_is_read_as_the_api_server_reads_it(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "-1", "8 cores", "1GB", "Gi", "1.2.3", "1e99999", "0x10", "1" * 33, "1 Gi"]
)
def test_what_is_not_a_quantity_is_refused(text):
    with pytest.raises(BadQuantity):
        parse_quantity(text)


# --- the manifest ---------------------------------------------------------------------------


def test_the_pod_template_sizes_the_container_and_mounts_shm_claims_and_secrets():
    spec = replace(
        SPEC,
        cpu="8",
        memory="64Gi",
        ephemeral_storage="100Gi",
        shm="16Gi",
        volumes=(
            ClaimMount("imagenet", "/data", read_only=True),
            ClaimMount("checkpoints", "/checkpoints"),
        ),
        env_from_secrets=("wandb", "s3-creds"),
        image_pull_secrets=("registry-team-a",),
        tolerations=(GPU_TOLERATION,),
    )

    pod = render_pod_template(spec, "Never")["spec"]

    sized = {
        "cpu": "8",
        "ephemeral-storage": "100Gi",
        "memory": "64Gi",
        "nvidia.com/mig-3g.40gb": "1",
    }
    assert pod["containers"] == [
        {
            "name": "main",
            "image": "pytorch/pytorch:2.4-cuda12.4",
            "command": ["python", "train.py"],
            "env": [{"name": "EPOCHS", "value": "3"}],
            "envFrom": [{"secretRef": {"name": "wandb"}}, {"secretRef": {"name": "s3-creds"}}],
            "volumeMounts": [
                {"name": "shm", "mountPath": SHM_MOUNT_PATH},
                {"name": "data-0", "mountPath": "/data", "readOnly": True},
                {"name": "data-1", "mountPath": "/checkpoints"},
            ],
            "resources": {"requests": sized, "limits": sized},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        }
    ]
    assert pod["volumes"] == [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        {"name": "data-0", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
        {"name": "data-1", "persistentVolumeClaim": {"claimName": "checkpoints"}},
    ]
    assert pod["imagePullSecrets"] == [{"name": "registry-team-a"}]
    assert pod["tolerations"] == [GPU_TOLERATION]
    # still what Pod Security `restricted` admits: no host paths, no privilege
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert all(set(v) & {"emptyDir", "persistentVolumeClaim"} for v in pod["volumes"])


def test_a_pod_that_asks_for_nothing_more_renders_as_before():
    pod = render_pod_template(SPEC, "Never")["spec"]

    assert set(pod) == {
        "restartPolicy",
        "priorityClassName",
        "nodeSelector",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "securityContext",
        "containers",
    }
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert not {"envFrom", "volumeMounts"} & set(pod["containers"][0])


# --- input checks: each bad value is refused on its field ------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("cpu", "-1", "must not be negative"),
        ("cpu", "0", "above zero"),
        ("cpu", "0.0001", "below the least"),
        ("cpu", "8 cores", "e.g. 8 or 500m"),
        ("cpu", "65", "above the most one workload may ask for (64, setting WORKLOAD_MAX_CPU)"),
        ("cpu", True, "is a Kubernetes quantity"),
        ("memory", "64GB", "e.g. 64Gi"),
        ("memory", "1Ei", "setting WORKLOAD_MAX_MEMORY"),
        ("memory", "100", "below the least a container runs with (1Mi)"),
        ("ephemeral_storage", "2Ti", "setting WORKLOAD_MAX_EPHEMERAL_STORAGE"),
        ("ephemeral_storage", ["1Gi"], "is a Kubernetes quantity"),
    ],
)
def test_a_bad_quantity_is_refused_naming_its_field(settings, field, value, says):
    settings.WORKLOAD_MAX_CPU = "64"
    settings.WORKLOAD_MAX_MEMORY = "256Gi"
    settings.WORKLOAD_MAX_EPHEMERAL_STORAGE = "1Ti"
    with pytest.raises(InvalidInput) as refused:
        workload_input.check_quantity(value, field)
    assert refused.value.field == field
    assert says in refused.value.detail


def test_good_quantities_are_kept_as_given(settings):
    settings.WORKLOAD_MAX_CPU = "64"
    assert workload_input.check_quantity("500m", "cpu") == "500m"
    assert workload_input.check_quantity("", "cpu") == ""
    assert workload_input.check_quantity(None, "memory") == ""


@pytest.mark.parametrize(
    ("shm", "memory", "says"),
    [
        ("32Gi", "16Gi", "shm '32Gi' is above memory '16Gi': /dev/shm is memory-backed"),
        ("8Gi", "", "above the namespace's default memory limit (4Gi)"),
        ("512Ki", "", "below 1Mi"),
        ("lots", "", "e.g. 16Gi"),
    ],
)
def test_shm_must_fit_in_the_containers_memory(shm, memory, says):
    with pytest.raises(InvalidInput) as refused:
        workload_input.check_shm(shm, memory)
    assert refused.value.field == "shm"
    assert says in refused.value.detail


def test_shm_within_memory_is_kept():
    assert workload_input.check_shm("16Gi", "64Gi") == "16Gi"
    assert workload_input.check_shm("1Gi", "") == "1Gi"


@pytest.mark.parametrize(
    ("volumes", "says"),
    [
        ({"claim": "data"}, "volumes must be a list"),
        (["data:/data"], 'give {"claim": PVC'),
        ([{"claim": "data", "mount_path": "/data", "mode": "rw"}], 'give {"claim": PVC'),
        ([{"claim": "Data_Set", "mount_path": "/data"}], "is not a PersistentVolumeClaim name"),
        ([{"claim": "data", "mount_path": "data"}], "must be an absolute path"),
        ([{"claim": "data", "mount_path": "/data/"}], "no trailing '/'"),
        ([{"claim": "data", "mount_path": "/data//x"}], "no '//'"),
        ([{"claim": "data", "mount_path": "/data/../etc"}], "has . or .. in it"),
        ([{"claim": "data", "mount_path": "/a b"}], "letters, digits"),
        ([{"claim": "data", "mount_path": "/"}], "must be an absolute path of letters"),
        ([{"claim": "data", "mount_path": SHM_MOUNT_PATH}], "ask for shared memory with shm"),
        ([{"claim": "data", "mount_path": "/proc/x"}], "is under /proc"),
        ([{"claim": "data", "mount_path": "/etc"}], "is under /etc"),
        ([{"claim": "data", "mount_path": "/usr/local/lib"}], "is under /usr"),
        (
            [{"claim": "data", "mount_path": "/var/run/secrets/kubernetes.io"}],
            "is under /var/run/secrets",
        ),
        ([{"claim": "data", "mount_path": "/data", "read_only": "yes"}], "true or false"),
        (
            [{"claim": "a", "mount_path": "/a"}, {"claim": "a", "mount_path": "/b"}],
            "claim 'a' is mounted twice",
        ),
        (
            [{"claim": "a", "mount_path": "/a"}, {"claim": "b", "mount_path": "/a"}],
            "two volumes are mounted at /a",
        ),
        ([{"claim": f"c{i}", "mount_path": f"/m{i}"} for i in range(3)], "at most 2 volumes"),
    ],
)
def test_a_bad_volume_is_refused_on_volumes(settings, volumes, says):
    settings.WORKLOAD_MAX_VOLUMES = 2
    with pytest.raises(InvalidInput) as refused:
        workload_input.check_volumes(volumes)
    assert refused.value.field == "volumes"
    assert says in refused.value.detail


def test_volumes_are_kept_with_read_only_spelt_out():
    assert workload_input.check_volumes(
        [
            {"claim": "imagenet", "mount_path": "/data", "read_only": True},
            {"claim": "ckpt.v1", "mount_path": "/ckpt"},
        ]
    ) == [
        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
        {"claim": "ckpt.v1", "mount_path": "/ckpt", "read_only": False},
    ]


@pytest.mark.parametrize(
    ("names", "says"),
    [
        ("wandb", "must be a list of Secret names"),
        ([7], "must be a list of Secret names"),
        (["WandB"], "'WandB' is not a Secret name"),
        (["a", "a"], "a Secret is named twice"),
        ([f"s{i}" for i in range(17)], "at most 16 Secrets"),
    ],
)
@pytest.mark.parametrize("field", ["env_from_secrets", "image_pull_secrets"])
def test_bad_secret_names_are_refused_on_their_field(names, says, field):
    with pytest.raises(InvalidInput) as refused:
        workload_input.check_secret_names(names, field)
    assert refused.value.field == field
    assert says in refused.value.detail


def test_what_a_namespace_can_never_hold_is_refused(settings):
    settings.TENANT_CPU_QUOTA = "64"
    settings.TENANT_MEMORY_QUOTA = "256Gi"
    workload_input.check_fits_namespace({"cpu": "32", "memory": "128Gi"}, pods=2)
    with pytest.raises(QuotaExceeded) as refused:
        workload_input.check_fits_namespace({"cpu": "32", "memory": ""}, pods=3)
    assert refused.value.field == "cpu"
    assert "3 pods × 32 is more than a team's namespace ever runs (64" in refused.value.detail


# --- admission: stored, audited, rendered -----------------------------------------------------


@pytest.fixture
def granted(world):
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=4)
    return world


def submit(world, **kw):
    return workloads.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="train-big",
            kind="job",
            image="pytorch/pytorch:2.4-cuda12.4",
            resources={world.rc.slug: 1},
            priority="gpu-low",
            **kw,
        ),
    )


ASKS = {
    "cpu": "16",
    "memory": "128Gi",
    "ephemeral_storage": "100Gi",
    "shm": "32Gi",
    "volumes": [{"claim": "imagenet", "mount_path": "/data", "read_only": True}],
    "env_from_secrets": ["wandb"],
    "image_pull_secrets": ["registry-team-a"],
}


@pytest.mark.django_db
def test_a_sized_workload_is_stored_audited_and_rendered(granted, settings):
    settings.GPU_NODE_TOLERATIONS = [GPU_TOLERATION]
    w = submit(granted, **ASKS)

    assert {k: getattr(w, k) for k in ASKS} == ASKS
    audit = AuditEvent.objects.get(verb="workload.submitted", object_id=str(w.pk))
    assert {k: audit.after[k] for k in ASKS} == ASKS
    spec = spec_for(w)
    assert (spec.cpu, spec.memory, spec.ephemeral_storage, spec.shm) == (
        "16",
        "128Gi",
        "100Gi",
        "32Gi",
    )
    assert spec.volumes == (ClaimMount("imagenet", "/data", read_only=True),)
    assert spec.env_from_secrets == ("wandb",) and spec.image_pull_secrets == ("registry-team-a",)
    assert spec.tolerations == (GPU_TOLERATION,)


@pytest.mark.django_db
def test_a_workload_without_them_keeps_the_namespace_defaults(granted):
    w = submit(granted)
    assert (w.cpu, w.memory, w.ephemeral_storage, w.shm) == ("", "", "", "")
    assert (w.volumes, w.env_from_secrets, w.image_pull_secrets) == ([], [], [])


@pytest.mark.django_db
def test_a_refused_ask_creates_nothing(granted):
    with pytest.raises(InvalidInput) as refused:
        submit(granted, memory="8Gi", shm="16Gi")
    assert refused.value.field == "shm"
    assert not granted.tenant.workloads.filter(name="train-big").exists()
