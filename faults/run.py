"""The fault run itself: set-up, each fault, convergence and the table of what was lost.

Everything here needs Django set up (models, services, the portal's tasks); `python -m faults`
(faults/__main__.py) calls django.setup() before it imports this module.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import close_old_connections

from demo.dcgm import DcgmStandin
from demo.prometheus import PrometheusServer
from faults import invariants, stack
from faults.load import Load
from faults.options import ALL, SHORT
from faults.stack import say
from localcluster import build, cluster, components
from localcluster.fleet import node_manifest
from scheduler.cluster import tasks
from scheduler.cluster.kube import KubeGateway
from scheduler.mig import orders
from scheduler.mig.models import Plan
from tenants.models import AuditEvent
from tenants.services.tokens import issue_token
from tests.scheduler.cluster_helpers import gpu_pod_on, no_disruption_budget

# Keeps every pod but the rollout fault's own off the nodes it creates.
ROLLOUT_NODE_TAINT = {"key": "gpu-portal.local/faults", "value": "rollout", "effect": "NoSchedule"}
# Issue 30: a MIG rollout whose worker is killed is resumed and applied within this.
ROLLOUT_GOAL_S = 30


def _fresh(check: Callable[[], bool]) -> Callable[[], bool]:
    """`check`, each time on a fresh database connection (the database may have restarted)."""

    def fresh_check() -> bool:
        close_old_connections()
        return check()

    return fresh_check


@dataclass
class Row:
    fault: str
    recovery_s: float | None = None
    grants: list[str] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)
    metering: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    duplicate_beats: list[str] = field(default_factory=list)
    rollouts: list[str] = field(default_factory=list)
    answers: str = ""

    @property
    def lost(self) -> int:
        return sum(
            len(x)
            for x in (
                self.grants,
                self.workloads,
                self.audit,
                self.metering,
                self.server_errors,
                self.duplicate_beats,
                self.rollouts,
            )
        )


class Run:
    def __init__(self, args):
        self.args = args
        self._cleanup: list[tuple[str, str, str | None]] = []  # cluster objects a fault made
        self.pg = stack.Postgres()
        self.redis = stack.Redis()
        self.rows: list[Row] = []

    # --- set-up -------------------------------------------------------------------------------

    def setup(self) -> None:
        stack.clean_work_dir()
        say("PostgreSQL (own cluster), Redis (own server)")
        self.pg.fresh()
        self.redis.start()
        os.environ.update(stack.portal_env("", self.redis.url, self.pg.url))
        self.kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))  # set-up: the admin
        self._clean_cluster()
        say("migrate and seed")
        call_command("migrate", verbosity=0)
        call_command("seed_demo", verbosity=0)
        self.tokens = self._tokens()
        self.prometheus = self._prometheus()
        env = stack.portal_env(
            self.prometheus.url if self.prometheus else "", self.redis.url, self.pg.url
        )
        self.portal = stack.Portal(env)
        say("web, worker and beat")
        self.portal.start()
        self.load = Load(self.portal.base, self.tokens)
        self.load.start()
        say("warming up: every grant on the cluster")
        if self._converge(timeout=120)[0] is None:
            raise RuntimeError("the portal did not converge before any fault: see .local/faults/")

    def _tokens(self) -> dict[str, str]:
        users = {u.username: u for u in get_user_model().objects.all()}
        scopes = {
            "alice": ["read", "request"],
            "bob": ["read", "submit"],
            "admin": ["read", "approve"],
        }
        return {
            name: issue_token(actor=None, user=users[name], name="faults", scopes=s)[1]
            for name, s in scopes.items()
        }

    def _prometheus(self):
        if PrometheusServer.binary() is None:
            say("no prometheus binary: the Prometheus fault is skipped")
            return None
        self.dcgm = DcgmStandin(self.kube)
        server = PrometheusServer([f"127.0.0.1:{self.dcgm.start()}"])
        server.start()
        return server

    def _clean_cluster(self) -> None:
        """What an earlier run of this instance left: its namespaces and queues."""
        selector = f"gpu-portal.io/instance={stack.INSTANCE}"
        for kind in ("Namespace", "ClusterQueue"):
            for obj in self.kube.list(kind, label_selector=selector):
                self.kube.delete(kind, obj["metadata"]["name"])

    def teardown(self) -> None:
        for step in (
            lambda: self.load.stop(),
            lambda: self.portal.stop(),
            lambda: self.prometheus and self.prometheus.stop(),
            lambda: self.dcgm.stop(),
            lambda: self._clean_cluster(),
            lambda: [self.kube.delete(kind, name, ns) for kind, name, ns in self._cleanup],
            lambda: self.redis.stop(keep=False),
            lambda: self.pg.stop(),
        ):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - tear down as much as possible
                say(f"teardown: {exc}")

    # --- convergence and checks -------------------------------------------------------------

    def _converge(self, timeout: float) -> tuple[float | None, list[str], list[str]]:
        """Seconds until grants and workloads converge (None if not within `timeout`), and
        what the last look found behind: tenants, and workloads lost or duplicated."""
        t0 = time.monotonic()
        behind: list[str] = []
        workloads: list[str] = []
        while time.monotonic() - t0 < timeout:
            close_old_connections()
            try:
                behind = invariants.grants_behind(self.kube)
                problems = invariants.workload_problems(self.kube, self.load)
                workloads = problems["lost"] + problems["duplicated"]
            except Exception as exc:  # noqa: BLE001 - the cluster or database may be coming back
                behind, workloads = [f"cannot check yet: {exc}"], []
            if not behind and not workloads:
                return time.monotonic() - t0, [], []
            time.sleep(1)
        return None, behind, workloads

    def measure(self, name: str, started: datetime, recovered_at: float) -> Row:
        row = Row(name)
        self.load.pause()
        margin = 2 * float(stack.PERIODS["RECONCILE_ALL_EVERY_S"]) + 30
        took, row.grants, row.workloads = self._converge(timeout=margin)
        row.recovery_s = None if took is None else time.monotonic() - recovered_at
        close_old_connections()
        row.audit = invariants.audit_missing(self.load)
        # metering: an ingest after recovery fills the outage's minutes
        recovered = datetime.now(UTC)
        try:
            stack.wait_until(
                "an ingest after recovery",
                _fresh(lambda: invariants.ingest_caught_up(recovered)),
                timeout=3 * float(settings.CELERY_BEAT_SCHEDULE["ingest-allocations"]["schedule"])
                + 15,
            )
        except TimeoutError as exc:
            row.metering.append(str(exc))
        row.metering += invariants.metering_gaps(started, recovered)
        tally = self.load.tallies[name]
        row.server_errors = list(tally.server_errors)
        row.answers = ", ".join(f"{k}×{v}" for k, v in sorted(tally.statuses.items()))
        if tally.unreachable:
            row.answers += f", unreachable×{tally.unreachable}"
        self.load.resume()
        return row

    # --- the faults -------------------------------------------------------------------------

    def fault(self, name: str) -> Row:
        say(f"fault: {name}")
        self.load.phase = name
        started = datetime.now(UTC)
        time.sleep(3)  # the stream in flight before the fault
        getattr(self, "f_" + name.replace("-", "_"))()
        recovered_at = time.monotonic()
        row = self.measure(name, started, recovered_at)
        say(f"  recovered in {row.recovery_s}, lost {row.lost}")
        return row

    def f_worker_kill_reconcile(self) -> None:
        tasks.reconcile_all.delay()  # work in flight on the worker
        time.sleep(1.0)
        self.portal.worker.kill9()
        time.sleep(5)  # approvals keep arriving; their reconcile messages wait
        self.portal.worker.start()

    def f_worker_kill_rollout(self) -> None:
        """A MIG rollout over two fresh nodes; the worker is killed while the first node's drain
        waits on a PodDisruptionBudget (lifted meanwhile). The periodic check must resume it
        where it stopped within ROLLOUT_GOAL_S of the restart: both nodes relabelled, none left
        cordoned, resumed once, nothing applied twice."""
        tag = f"{int(time.time()) % 100000}"
        nodes = [f"faults-mig-{tag}-{n}" for n in range(2)]
        ns = f"{stack.INSTANCE}-mig-{tag}"
        self._cleanup += [("Node", n, None) for n in nodes] + [("Namespace", ns, None)]
        self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for name in nodes:
            manifest = node_manifest(
                {
                    "name": name,
                    "model": "A100-80GB",
                    "gpus": 1,
                    "migConfig": "all-1g.10gb",
                    "devicePluginConfig": "default",
                }
            )
            # The load's 1g workloads fit these nodes: kube-scheduler placed one on the second
            # node, and the rollout rightly cordoned it too. Only this fault's pod goes there.
            manifest["spec"]["taints"].append(ROLLOUT_NODE_TAINT)
            self.kube.create(manifest)
        self._guarded_pod(ns, nodes[0])
        entries = [
            {
                "node": name,
                "model": "A100-80GB",
                "changed_gpus": [0],
                "current_mig_config": "all-1g.10gb",
                "mig_config": "all-balanced",
                "current_device_plugin_config": "default",
                "device_plugin_config": "",
                "state": "pending",
                "message": "",
            }
            for name in nodes
        ]
        admin = get_user_model().objects.get(username="admin")
        plan = Plan.objects.create(created_by=admin, nodes=entries, summary={}, policy={})
        orders.request_plan_apply(actor=admin, plan=plan)

        def first_node_draining():
            close_old_connections()
            entry = Plan.objects.get(pk=plan.pk).nodes[0]
            return entry["state"] == "applying" and entry.get("cordoned")

        stack.wait_until("the first node's drain waiting on its budget", first_node_draining, 60)
        self.portal.worker.kill9()
        self.kube.delete("PodDisruptionBudget", "guarded", ns)  # the budget is lifted meanwhile
        time.sleep(2)
        self.portal.worker.start()
        # its lease died with the worker: stuck after a hand-over, then the periodic check
        limit = Plan.handover_s() + settings.MIG_ROLLOUT_RESUME_EVERY_S + ROLLOUT_GOAL_S
        started = time.monotonic()
        problems = []
        self._rollout_s: float | None = None
        try:
            stack.wait_until(
                "the rollout resumed and applied",
                _fresh(lambda: Plan.objects.get(pk=plan.pk).status == Plan.Status.APPLIED),
                limit,
                2,
            )
            self._rollout_s = time.monotonic() - started
            say(f"  rollout resumed and applied {self._rollout_s:.0f} s after the restart")
        except TimeoutError as exc:
            problems.append(f"{exc} (status {Plan.objects.get(pk=plan.pk).status})")
        if self._rollout_s is not None and self._rollout_s > ROLLOUT_GOAL_S:
            problems.append(
                f"applied {self._rollout_s:.0f} s after the restart (goal: {ROLLOUT_GOAL_S} s)"
            )
        for name in nodes:
            node = self.kube.get("Node", name) or {}
            labels = node.get("metadata", {}).get("labels", {})
            if labels.get("nvidia.com/mig.config") != "all-balanced":
                problems.append(f"{name}: mig.config {labels.get('nvidia.com/mig.config')}")
            if node.get("spec", {}).get("unschedulable"):
                problems.append(f"{name}: left cordoned")
        events = AuditEvent.objects.filter(object_id=str(plan.pk))
        resumed = events.filter(verb="plan.apply_resumed").count()
        if resumed != 1:
            problems.append(f"resumed {resumed} times")
        # nothing applied twice: each node cordoned (the first only) and relabelled once
        for verb, expected in (("node.relabelled", nodes), ("node.cordoned", nodes[:1])):
            done = list(events.filter(verb=verb).values_list("after__node", flat=True))
            if sorted(done) != sorted(expected):
                problems.append(f"{verb} {done}, expected once each on {expected}")
        self._rollout_problems = problems

    def _guarded_pod(self, ns: str, node: str) -> None:
        """A GPU pod on `node` that its PodDisruptionBudget lets nobody evict."""
        gpu_pod_on(
            self.kube,
            ns,
            node,
            "guarded",
            labels={"app": "guarded"},
            tolerations=[{**ROLLOUT_NODE_TAINT, "operator": "Equal"}],
        )
        self.kube.create(no_disruption_budget("guarded", ns, {"app": "guarded"}))

    def _redis(self, keep: bool) -> None:
        self.portal.worker.stop()  # messages queue up while the worker is away
        time.sleep(4)
        queued = self.redis.queued()
        self.redis.stop(keep=keep)
        say(f"  Redis down with {queued} message(s) queued ({'kept' if keep else 'lost'})")
        time.sleep(3)
        self.redis.start()
        self.portal.worker.start()

    def f_redis_restart(self) -> None:
        self._redis(keep=True)

    def f_redis_flushed(self) -> None:
        self._redis(keep=False)

    def _cluster_component(self, name: str) -> None:
        component = next(c for c in components.component_specs(build.binaries()) if c.name == name)
        cluster.stop(component)
        time.sleep(15)
        cluster.up()

    def f_apiserver_stop(self) -> None:
        self._cluster_component("kube-apiserver")

    def f_etcd_stop(self) -> None:
        self._cluster_component("etcd")

    def f_postgres_restart(self) -> None:
        self.pg.stop()
        time.sleep(10)  # the API answers 503 meanwhile
        self.pg.start()

    def f_prometheus_stop(self) -> None:
        if self.prometheus is None:
            return
        self.prometheus.stop()
        time.sleep(self.args.prometheus_outage_s)
        self.prometheus.start()

    def f_beat_double(self) -> None:
        """Kill the beat and start two: only one may send periodic work."""
        self.portal.restart_beats(2)
        window = float(os.environ.get("BEAT_LOCK_TTL_S", "30")) + 25
        time.sleep(window)
        period = float(stack.PERIODS["EXPIRE_GRANTS_EVERY_S"])
        self._beat_problems = self.beat_duplicates(window, period)

    def beat_duplicates(self, window: float, period: float) -> list[str]:
        """Sends of expire-grants by the two beats beyond one per period."""
        sent = 0
        senders = 0
        for beat in self.portal.beats:
            text = beat.log.read_text(errors="replace").split("--- ")[-1]
            n = len(re.findall(r"Sending due task expire-grants", text))
            sent += n
            senders += bool(n)
        allowed = int(window / period) + 2
        problems = []
        if senders > 1:
            problems.append(f"both beats sent periodic work ({sent} sends)")
        if sent > allowed:
            problems.append(
                f"expire-grants sent {sent} times in {window:.0f} s (at most {allowed})"
            )
        return problems

    def main(self) -> int:
        names = self.args.only or (SHORT if self.args.short else ALL)
        try:
            self.setup()
            for name in names:
                row = self.fault(name)
                if name == "beat-double":
                    row.duplicate_beats = self._beat_problems
                if name == "worker-kill-rollout":
                    # recovered once the rollout is applied too, counted from the restart
                    row.rollouts = self._rollout_problems
                    if row.recovery_s is not None and self._rollout_s is not None:
                        row.recovery_s += self._rollout_s
                    else:
                        row.recovery_s = None
                self.rows.append(row)
        finally:
            self.teardown()
        self.print_table()
        return 1 if any(r.lost or r.recovery_s is None for r in self.rows) else 0

    def print_table(self) -> None:
        print()
        print(
            "| fault | recovery s | grants lost | workloads lost/duplicated | audit lost | "
            "metering gaps (min) | 5xx | duplicate beats | rollouts stuck | "
            "answers during the fault |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in self.rows:
            rec = "not recovered" if r.recovery_s is None else f"{r.recovery_s:.1f}"
            print(
                f"| {r.fault} | {rec} | {len(r.grants)} | {len(r.workloads)} | {len(r.audit)} | "
                f"{len(r.metering)} | {len(r.server_errors)} | {len(r.duplicate_beats)} | "
                f"{len(r.rollouts)} | {r.answers} |"
            )
        for r in self.rows:
            details = (
                r.grants
                + r.workloads
                + r.audit
                + r.metering
                + r.server_errors
                + r.duplicate_beats
                + r.rollouts
            )
            for d in details[:10]:
                print(f"  {r.fault}: {d}")
        if self.args.verbose:
            for name, tally in self.load.tallies.items():
                for refusal, n in tally.refusals.most_common(8):
                    print(f"  {name}: {n}× {refusal}")
