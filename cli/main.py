"""`gpu-portal` (or `python -m cli`): quota, request, submit --wait, status, cancel, resume,
logs; `admin …` for the platform team (cli/admin/); `completion bash|zsh|fish`.

Configured by GPU_PORTAL_URL and GPU_PORTAL_TOKEN. Exit status of `submit --wait` and `wait`:
0 succeeded (a deployment: running), 1 failed, 3 cancelled, 4 timed out (the workload is not
cancelled: it keeps its course), 6 timed out and cancelled (`--cancel-on-timeout`); 5 the API
refused the call (the reason is printed), for every command. Work waiting in the team's queue
(`queued`, with its position) or preempted and queued again is followed until it ends.
"""

from __future__ import annotations

import json

import click

from cli.admin import admin
from cli.calendar import calendar
from cli.client import ApiError
from cli.completion import completion
from cli.output import fail, table
from cli.session import Session, client
from cli.waiting import follow, status_line, waiting_lines
from cli.workspaces import workspace

__all__ = ["cli", "main", "status_line", "waiting_lines"]

CANCEL_ON_TIMEOUT_HELP = (
    "at the timeout, cancel the workload (exit 6); without it a timed-out wait leaves it "
    "queued or running (exit 4)"
)


def _pairs(values: tuple[str, ...], what: str, as_int: bool = False) -> dict:
    out: dict = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r}: use KEY=VALUE", param_hint=what)
        if as_int:
            try:
                out[key] = int(val)
            except ValueError:
                raise click.BadParameter(f"{value!r}: the amount must be a number") from None
        else:
            out[key] = val
    return out


def _secret_refs(values: tuple[str, ...]) -> dict:
    """--secret-env NAME=SECRET/KEY: the value of KEY in the Secret SECRET of the team's
    namespace, so that the secret itself never passes through the portal."""
    out: dict = {}
    for name, ref in _pairs(values, "--secret-env").items():
        secret, slash, key = ref.partition("/")
        if not slash or not secret or not key:
            raise click.BadParameter(
                f"{name}={ref!r}: use NAME=SECRET/KEY, e.g. AWS_SECRET_ACCESS_KEY=s3-creds/secret",
                param_hint="--secret-env",
            )
        out[name] = {"secret": secret, "key": key}
    return out


def _volumes(values: tuple[str, ...]) -> list[dict]:
    """--volume CLAIM:/path[:ro]: an existing PersistentVolumeClaim of the team's namespace,
    mounted at /path (read-only with :ro)."""
    out = []
    for value in values:
        claim, sep, path = value.partition(":")
        read_only = path.endswith(":ro")
        path = path.removesuffix(":ro")
        if not sep or not claim or not path.startswith("/"):
            raise click.BadParameter(
                f"{value!r}: use CLAIM:/path or CLAIM:/path:ro, e.g. datasets:/data:ro",
                param_hint="--volume",
            )
        out.append({"claim": claim, "mount_path": path, "read_only": read_only})
    return out


@click.group()
@click.option("--url", envvar="GPU_PORTAL_URL", help="the portal (env GPU_PORTAL_URL)")
@click.option("--token", envvar="GPU_PORTAL_TOKEN", help="an API token (env GPU_PORTAL_TOKEN)")
@click.option("--json", "as_json", is_flag=True, help="print raw JSON")
@click.pass_context
def cli(ctx, url, token, as_json):
    """The GPU Portal from a shell or a CI pipeline."""
    ctx.obj = Session(url, token, as_json)


cli.add_command(admin)
cli.add_command(completion)
cli.add_command(workspace)
cli.add_command(calendar)


def _out(ctx, data, text: str) -> None:
    click.echo(json.dumps(data, indent=2) if ctx.obj.as_json else text)


@cli.command()
@click.option("--tenant", help="only this tenant")
@click.pass_context
def quota(ctx, tenant):
    """Granted, in use and free per resource class, and per GPU model in compute slices."""
    try:
        path = f"/api/v1/tenants/{tenant}/" if tenant else "/api/v1/tenants/"
        data = client(ctx).get(path)
    except ApiError as exc:
        fail(exc)
    tenants = [data] if tenant else data["results"]
    lines = []
    for t in tenants:
        lines.append(f"{t['slug']} ({t['status']}, namespace {t['namespace']})")
        for q in t["quota"] or []:
            lines.append(
                f"  {q['resource_class']:<28} granted {q['granted']:>4}  in use {q['in_use']:>4}"
                f"  free {q['free']:>4}"
            )
        if not t["quota"]:
            lines.append("  no quota")
        # a model's grants in compute slices: any shape of the model draws on them
        for m in t.get("slices") or []:
            lines.append(f"  {m['summary']}")
    _out(ctx, tenants, "\n".join(lines))


@cli.command()
@click.option("--tenant", required=True)
@click.option("--item", "items", multiple=True, required=True, help="CLASS=AMOUNT (repeatable)")
@click.option("--from", "starts_at", help="start (ISO 8601); omit for now, later books ahead")
@click.option("--until", "ends_at", help="end (ISO 8601); omit for open-ended")
@click.option("--why", "justification", required=True)
@click.option("--idempotency-key", help="reuse on a retried CI step")
@click.pass_context
def request(ctx, tenant, items, starts_at, ends_at, justification, idempotency_key):
    """Ask for capacity, now or booked ahead (--from)."""
    body = {
        "tenant": tenant,
        "items": _pairs(items, "--item", as_int=True),
        **({"starts_at": starts_at} if starts_at else {}),
        "ends_at": ends_at,
        "justification": justification,
    }
    try:
        data = client(ctx).post("/api/v1/capacity-requests/", body, idempotency_key=idempotency_key)
    except ApiError as exc:
        fail(exc)
    why = f" ({'; '.join(data['policy_reasons'])})" if data["policy_reasons"] else ""
    _out(ctx, data, f"request #{data['id']}: {data['state']}{why}")


def _autoscaling(low, high, gpu_util, latency_ms, per_s) -> dict | None:
    given = {
        "min_replicas": low,
        "max_replicas": high,
        "target_gpu_util": gpu_util,
        "target_latency_ms": latency_ms,
        "target_requests_per_s": per_s,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return None
    if high is None:
        raise click.UsageError("autoscaling needs --max-replicas")
    if gpu_util is None and latency_ms is None and per_s is None:
        raise click.UsageError("autoscaling needs --target-gpu-util, --target-latency-ms "
                               "and/or --target-requests-per-s")  # fmt: skip
    return given


def _number(value) -> str:
    """A target as a person writes it: 5 for 5.0, 0.25 for 0.25 (the API sends floats)."""
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def _ask(resources, model, memory_gb, slices) -> dict:
    """`resources` from --gpu, or `need` from --model and its sizes: exactly one of them."""
    if bool(resources) == bool(model):
        raise click.UsageError("give --gpu CLASS=UNITS, or --model with --gpu-memory-gb and/or "
                               "--compute-slices: one of the two")  # fmt: skip
    if resources:
        return {"resources": _pairs(resources, "--gpu", as_int=True)}
    need = {"gpu_model": model, "gpu_memory_gb": memory_gb, "compute_slices": slices}
    return {"need": {k: v for k, v in need.items() if v is not None}}


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--tenant", required=True)
@click.option("--name", required=True)
@click.option("--kind", type=click.Choice(["job", "deployment"]), default="job")
@click.option("--image", required=True)
@click.option("--gpu", "resources", multiple=True, help="CLASS=UNITS (or ask by need below)")
@click.option("--model", "need_model", help="ask by need: the GPU model, e.g. A100-80GB")
@click.option("--gpu-memory-gb", type=int, help="ask by need: at least this much GPU memory")
@click.option("--compute-slices", type=int, help="ask by need: at least this many of 7 slices")
@click.option("--priority", default="gpu-low")
@click.option("--env", "env", multiple=True, help="NAME=VALUE (repeatable)")
@click.option(
    "--secret-env",
    "secret_env",
    multiple=True,
    help="NAME=SECRET/KEY: a value from a Secret in the team's namespace (repeatable)",
)
@click.option("--replicas", type=int, default=1)
@click.option("--pods", type=int, default=1, help="jobs: N pods started together (torchrun -N)")
@click.option("--same-rack", is_flag=True, help="jobs of 2+ pods: all in one rack, else it waits")
@click.option("--topology", help="jobs of 2+ pods: e.g. rack-preferred, block-required")
@click.option("--min-replicas", type=int, help="autoscaling: pods at least (default --replicas)")
@click.option("--max-replicas", type=int, help="autoscaling: pods at most (quota is held for it)")
@click.option("--target-gpu-util", type=int, help="autoscaling: average GPU utilisation, %")
@click.option("--target-latency-ms", type=int, help="autoscaling: average request latency, ms")
@click.option(
    "--target-requests-per-s", type=float, help="autoscaling: requests per second per replica"
)
@click.option("--backoff-limit", type=int, default=0)
@click.option("--cpu", help="CPU cores, requests = limits, e.g. 8 or 500m")
@click.option("--memory", help="memory, requests = limits, e.g. 64Gi")
@click.option("--ephemeral-storage", help="scratch disk, requests = limits, e.g. 100Gi")
@click.option("--shm", help="size of /dev/shm (memory-backed, counts against --memory), e.g. 16Gi")
@click.option(
    "--volume",
    "volumes",
    multiple=True,
    help="CLAIM:/path[:ro]: mount an existing PersistentVolumeClaim of the team (repeatable)",
)
@click.option(
    "--env-from-secret",
    "env_from_secrets",
    multiple=True,
    help="NAME: every key of this Secret of the team becomes an env variable (repeatable)",
)
@click.option(
    "--image-pull-secret",
    "image_pull_secrets",
    multiple=True,
    help="NAME: a Secret of the team with the registry's credentials (repeatable)",
)
@click.option("--wait", is_flag=True, help="wait until it ends; exit status tells how")
@click.option("--timeout", type=float, default=3600.0, help="seconds to wait")
@click.option("--cancel-on-timeout", is_flag=True, help=CANCEL_ON_TIMEOUT_HELP)
@click.option("--interval", type=float, default=2.0, help="seconds between polls")
@click.option("--idempotency-key", help="reuse on a retried CI step (e.g. $CI_JOB_ID)")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx, tenant, name, kind, image, resources, need_model, gpu_memory_gb, compute_slices,
           priority, env, secret_env, replicas, pods, same_rack, topology,
           min_replicas, max_replicas, target_gpu_util, target_latency_ms, target_requests_per_s,
           backoff_limit, cpu, memory, ephemeral_storage, shm, volumes, env_from_secrets,
           image_pull_secrets, wait, timeout, cancel_on_timeout, interval, idempotency_key,
           command):  # fmt: skip
    """Submit a workload; the container command follows `--`. A deployment autoscales between
    --min-replicas and --max-replicas on --target-gpu-util, --target-latency-ms and/or
    --target-requests-per-s (per replica). --cpu, --memory and --ephemeral-storage size the
    container (the namespace's defaults otherwise); --volume, --env-from-secret and
    --image-pull-secret name what already exists in the team's namespace. Ask by --gpu
    CLASS=UNITS, or by need: --model with --gpu-memory-gb and/or --compute-slices, and the
    portal chooses the shape (free now, else the cheapest)."""
    autoscaling = _autoscaling(min_replicas, max_replicas, target_gpu_util, target_latency_ms,
                               target_requests_per_s)  # fmt: skip
    body = {
        "tenant": tenant,
        "name": name,
        "kind": kind,
        "image": image,
        **_ask(resources, need_model, gpu_memory_gb, compute_slices),
        "priority": priority,
        "env": {**_pairs(env, "--env"), **_secret_refs(secret_env)},
        "command": list(command),
        "replicas": replicas,
        "backoff_limit": backoff_limit,
    }
    if pods != 1:
        body["pods"] = pods
    if same_rack or topology:
        body["topology"] = topology or "rack-required"
    if autoscaling:
        body["autoscaling"] = autoscaling
    sizes = {"cpu": cpu, "memory": memory, "ephemeral_storage": ephemeral_storage, "shm": shm}
    body.update({k: v for k, v in sizes.items() if v})
    if volumes:
        body["volumes"] = _volumes(volumes)
    if env_from_secrets:
        body["env_from_secrets"] = list(env_from_secrets)
    if image_pull_secrets:
        body["image_pull_secrets"] = list(image_pull_secrets)
    try:
        w = client(ctx).post("/api/v1/workloads/", body, idempotency_key=idempotency_key)
    except ApiError as exc:
        fail(exc)
    _out(ctx, w, str(w["id"]))
    click.echo(status_line(w), err=True)
    if wait:
        follow(client(ctx), w["id"], kind, timeout, interval, cancel_on_timeout=cancel_on_timeout)


@cli.command(short_help="Wait for a workload to end; the exit status tells how.")
@click.argument("workload_id", type=int)
@click.option("--timeout", type=float, default=3600.0, help="seconds to wait")
@click.option("--cancel-on-timeout", is_flag=True, help=CANCEL_ON_TIMEOUT_HELP)
@click.option("--interval", type=float, default=2.0, help="seconds between polls")
@click.pass_context
def wait(ctx, workload_id, timeout, cancel_on_timeout, interval):
    """Wait for a workload to end; the exit status tells how: 0 succeeded (a deployment:
    running), 1 failed, 3 cancelled, 4 timed out (the workload is NOT cancelled: it keeps
    waiting or running, and the message says how to cancel it), 6 timed out and cancelled
    (--cancel-on-timeout), 5 the API refused the call."""
    try:
        w = client(ctx).get(f"/api/v1/workloads/{workload_id}/")
    except ApiError as exc:
        fail(exc)
    follow(
        client(ctx), workload_id, w["kind"], timeout, interval, cancel_on_timeout=cancel_on_timeout
    )


WORKLOAD_COLUMNS = [
    ("id", "ID"),
    ("tenant", "TENANT"),
    ("name", "NAME"),
    ("kind", "KIND"),
    ("origin", "FROM"),
    ("state", "STATE"),
    ("queue_position", "PLACE"),
    ("reason", "REASON"),
]


@cli.command("list")
@click.option("--tenant", help="only this team's")
@click.option("--state", help="only in this state (queued, running, ...)")
@click.pass_context
def list_workloads(ctx, tenant, state):
    """A team's workloads, newest first, wherever they came from: the portal, or kubectl, Helm
    or a framework (FROM names the object the portal follows)."""
    query = {k: v for k, v in (("tenant", tenant), ("state", state)) if v}
    try:
        rows = client(ctx).get_all("/api/v1/workloads/", ordering="-created_at", **query)
    except ApiError as exc:
        fail(exc)
    _out(ctx, rows, table(rows, WORKLOAD_COLUMNS, empty="no workloads"))


@cli.command()
@click.argument("workload_id", type=int)
@click.pass_context
def status(ctx, workload_id):
    """A workload's state, reason and events; why it waits, while it does."""
    try:
        w = client(ctx).get(f"/api/v1/workloads/{workload_id}/")
    except ApiError as exc:
        fail(exc)
    # While it waits, the cluster's words come last, after the reason in words.
    lines = [status_line(w, message=not w.get("waiting")), *waiting_lines(w)]
    if scaling := w.get("autoscaling"):
        targets = [
            f"{label} {_number(scaling[key])}{unit}"
            for key, label, unit in (
                ("target_gpu_util", "GPU", " %"),
                ("target_latency_ms", "latency", " ms"),
                ("target_requests_per_s", "requests", "/s per replica"),
            )
            if scaling.get(key) is not None
        ]
        lines.append(
            f"  autoscaling {scaling['min_replicas']}-{scaling['max_replicas']} replicas on "
            + " and ".join(targets)
        )
    sizes = [
        f"{label} {w[key]}"
        for key, label in (
            ("cpu", "cpu"),
            ("memory", "memory"),
            ("ephemeral_storage", "ephemeral storage"),
            ("shm", "shared memory"),
        )
        if w.get(key)
    ]
    if sizes:
        lines.append("  " + ", ".join(sizes))
    for v in w.get("volumes") or []:
        mode = " (read-only)" if v.get("read_only") else ""
        lines.append(f"  volume {v['claim']} at {v['mount_path']}{mode}")
    for e in w.get("events", []):
        lines.append(f"  {e['created_at']}  {e['state']:<10} {e['reason']}  {e['message']}")
    _out(ctx, w, "\n".join(lines))


@cli.command()
@click.argument("workload_id", type=int)
@click.pass_context
def cancel(ctx, workload_id):
    """Cancel a workload (it is deleted from the cluster)."""
    try:
        w = client(ctx).post(f"/api/v1/workloads/{workload_id}/cancel/")
    except ApiError as exc:
        fail(exc)
    _out(ctx, w, status_line(w))


@cli.command()
@click.argument("workload_id", type=int)
@click.pass_context
def resume(ctx, workload_id):
    """Resume a workload suspended for holding idle GPUs (back to its team's queue)."""
    try:
        w = client(ctx).post(f"/api/v1/workloads/{workload_id}/resume/")
    except ApiError as exc:
        fail(exc)
    _out(ctx, w, status_line(w))


@cli.command()
@click.argument("workload_id", type=int)
@click.option("--tail", type=int, default=500)
@click.pass_context
def logs(ctx, workload_id, tail):
    """The newest pod's log (where the cluster serves logs)."""
    try:
        data = client(ctx).get(f"/api/v1/workloads/{workload_id}/logs/?tail={tail}")
    except ApiError as exc:
        fail(exc)
    _out(ctx, data, data["log"])


def main() -> None:
    cli(prog_name="gpu-portal")
