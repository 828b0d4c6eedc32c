"""What issue 55's profile found growing faster than the work, pinned without the cluster: a
namespace's queue sorted once per reading (not once per workload it holds), and the fleet's held
units read as a row per shape of workload (not a model instance per workload), and a lender's
queue line that names a few borrowers (not every one: the Queues page grew as teams²), and the
Queues page that sums every team's queue up and lists a page of them (not a card per team), and
the team page's waiting and latest workloads read off the team's indexes (not a scan of the
table, nor a sort of every workload the team ran)."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from portal import queue_board
from portal.borrowing import cohort_lines, with_lent_to
from scheduler.cluster.models import TenantSyncState
from scheduler.workloads.kinds import manifests
from scheduler.workloads.lifecycle import reading, side_by_side, sync, watching
from scheduler.workloads.models import Workload
from scheduler.workloads.selectors import held_by_class, usage_by_tenant
from tenants.models import Tenant
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import MembershipFactory, PlatformAdminFactory

NS = "ns-deep"
UID = "kueue.x-k8s.io/job-uid"


def queue_workload(name, uid, created, reserved=False):
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": created,
            "labels": {UID: uid},
        },
        "spec": {"priority": 0},
        "status": {"conditions": [{"type": "QuotaReserved", "status": str(reserved)}]},
    }


class Cluster:
    """The calls a namespace's sync makes: suspended Jobs, each with its pending Kueue Workload."""

    def __init__(self, workloads):
        self.jobs = {w.k8s_name: {"metadata": {"name": w.k8s_name}, "spec": {"suspend": True}}
                     for w in workloads}  # fmt: skip
        self.queue = [
            queue_workload(f"job-{w.k8s_name}-x", w.k8s_uid, f"2026-01-01T00:{i:02d}:00Z")
            for i, w in enumerate(workloads)
        ]

    def list(self, kind, namespace=None, **_):
        return {"KueueWorkload": self.queue, "Job": list(self.jobs.values())}.get(kind, [])

    def get(self, kind, name, namespace=None):
        return self.jobs.get(name)


@pytest.fixture
def deep_queue(db):
    made = timezone.now() - timedelta(hours=1)  # on the cluster well before any reading
    on_cluster = {"state": "queued", "namespace": NS, "cluster_created_at": made}
    return [WorkloadFactory(k8s_uid=f"u{i}", k8s_name=f"deep-{i}", **on_cluster) for i in range(12)]


@pytest.fixture
def sorts(monkeypatch):
    """How many times a namespace's queue is sorted into places."""
    calls = []
    real = manifests.queue_places

    def counted(pending):
        calls.append(len(pending))
        return real(pending)

    monkeypatch.setattr(reading, "queue_places", counted)
    return calls


def test_a_namespace_of_n_queued_workloads_is_sorted_once_not_n_times(deep_queue, sorts):
    readings, failed = side_by_side.sync_each(Cluster(deep_queue), [(w.pk, NS) for w in deep_queue])
    assert (failed, sorts) == ([], [12])
    places = dict(Workload.objects.filter(namespace=NS).values_list("k8s_uid", "queue_position"))
    assert places == {f"u{i}": i + 1 for i in range(12)}  # the same places as one by one


def test_the_queue_places_refresh_sorts_a_namespace_once(deep_queue, sorts):
    cluster = Cluster(deep_queue)
    cluster.queue[0]["status"]["conditions"][0]["status"] = "True"  # the first is admitted
    Workload.objects.filter(pk=deep_queue[0].pk).update(state=Workload.State.RUNNING)
    watching.refresh_queue_positions(cluster, [NS], {}, synced=set())
    assert sorts == [12]
    places = dict(Workload.objects.filter(namespace=NS).values_list("k8s_uid", "queue_position"))
    assert places == {"u0": None, **{f"u{i}": i for i in range(1, 12)}}


def test_the_places_of_many_namespaces_are_read_in_one_query_and_written_in_one(
    deep_queue, django_assert_num_queries
):
    """A query per namespace to read its waiting workloads, and an UPDATE per workload whose
    place moved, made a refresh of a thousand teams' queues thousands of statements."""
    others = []
    for ns in ("ns-deep-2", "ns-deep-3"):
        on_cluster = {"state": "queued", "namespace": ns, "cluster_created_at": timezone.now()}
        others += [WorkloadFactory(k8s_uid=f"{ns}-{i}", k8s_name=f"{ns}-{i}", **on_cluster)
                   for i in range(3)]  # fmt: skip
    readings = {
        NS: sync.NamespaceReading(pods={}, events=[], queue_workloads=Cluster(deep_queue).queue)
    }
    for ns in ("ns-deep-2", "ns-deep-3"):
        mine = [w for w in others if w.namespace == ns]
        queue = Cluster(mine).queue
        for w in queue:
            w["metadata"]["namespace"] = ns
        readings[ns] = sync.NamespaceReading(pods={}, events=[], queue_workloads=queue)
    Workload.objects.filter(pk=deep_queue[5].pk).update(state=Workload.State.RUNNING)
    with django_assert_num_queries(2):  # no kube call either: every namespace was read
        watching.refresh_queue_positions(None, [NS, "ns-deep-2", "ns-deep-3"], readings, set())
    places = dict(Workload.objects.values_list("k8s_uid", "queue_position"))
    assert places == {
        **{f"u{i}": i + 1 for i in range(12) if i != 5},
        "u5": None,  # running by now: not given a place
        **{f"{ns}-{i}": i + 1 for ns in ("ns-deep-2", "ns-deep-3") for i in range(3)},
    }


def test_places_that_all_leave_the_queue_are_written_too(deep_queue):
    """A statement whose every new place is NULL: PostgreSQL types a CASE of NULLs as text and
    refused it (the scale bench's sync failed on it when a queue emptied)."""
    watching.place({w.pk: None for w in deep_queue[:3]})
    watching.place({deep_queue[3].pk: 7})
    places = dict(Workload.objects.filter(namespace=NS).values_list("k8s_uid", "queue_position"))
    assert places == {
        "u0": None,
        "u1": None,
        "u2": None,
        "u3": 7,
        **{f"u{i}": None for i in range(4, 12)},
    }


def test_a_reading_vouches_for_what_is_gone_only_for_work_made_before_it_began(db):
    """A cluster-wide reading lists Jobs once; a workload whose Job was made as the lists ran
    is not in them, and is GOT rather than failed as deleted."""
    now = timezone.now()
    old, new = (
        WorkloadFactory(
            state="queued", namespace=NS, k8s_name=name, k8s_uid=name, cluster_created_at=at
        )
        for name, at in (("old", now - timedelta(hours=1)), ("new", now - timedelta(seconds=1)))
    )
    cluster = Cluster([old, new])  # both Jobs there when GOT
    reading = sync.NamespaceReading(
        pods={}, events=[], queue_workloads=cluster.queue, objects={"Job": {}}, taken_at=now
    )
    assert (
        reading.vouches_for(old.cluster_created_at),
        reading.vouches_for(new.cluster_created_at),
    ) == (True, False)
    sync.sync_workload(cluster, new.pk, reading)
    sync.sync_workload(cluster, old.pk, reading)
    new.refresh_from_db()
    old.refresh_from_db()
    assert new.state == "queued"  # its Job GOT: there
    assert (old.state, old.reason) == ("failed", "Deleted")  # not in a reading made after it


def test_queue_places_agree_with_the_place_of_each():
    queue = [
        queue_workload("b", "u1", "2026-01-01T00:01:00Z"),
        queue_workload("a", "u0", "2026-01-01T00:00:00Z", reserved=True),
        queue_workload("c", "u2", "2026-01-01T00:01:00Z"),
    ]
    places = manifests.queue_places(queue)
    assert places == {"b": 1, "c": 2}
    assert [manifests.queue_position(w, queue) for w in queue] == [1, None, 2]


@pytest.mark.django_db
def test_what_every_team_holds_is_one_query_of_a_row_per_shape(django_assert_num_queries):
    for _ in range(30):
        WorkloadFactory(state="running", replicas=2, resources={"a100-80gb": 1})
    WorkloadFactory(state="pending", replicas=1, resources={"a100-80gb": 1, "l40s-48gb": 2})
    WorkloadFactory(
        state="running", kind="deployment", replicas=1, max_replicas=4, held_replicas=3,
        target_gpu_util=70,
        resources={"l40s-48gb": 1},
    )  # fmt: skip
    WorkloadFactory(state="queued", replicas=8, resources={"a100-80gb": 1})  # holds nothing
    with django_assert_num_queries(1) as captured:
        held = held_by_class()
    assert held == {"a100-80gb": 61, "l40s-48gb": 5}
    assert "GROUP BY" in captured.captured_queries[0]["sql"]


@pytest.mark.django_db
def test_what_a_team_holds_and_runs_is_one_query_of_a_row_per_shape(django_assert_num_queries):
    """The team page's quota lines: a model instance per holding workload made them grow with
    the team's running work (41 ms for 2,000 at 50,000 workloads), as held_by_class did."""
    team = WorkloadFactory(state="running", replicas=2, resources={"a100-80gb": 1}).tenant
    for _ in range(29):
        WorkloadFactory(tenant=team, state="running", replicas=2, resources={"a100-80gb": 1})
    WorkloadFactory(tenant=team, state="pending", resources={"a100-80gb": 1, "l40s-48gb": 2})
    WorkloadFactory(
        tenant=team, state="running", kind="deployment", replicas=1, max_replicas=4,
        held_replicas=3, target_gpu_util=70, resources={"l40s-48gb": 1},
    )  # fmt: skip
    WorkloadFactory(tenant=team, state="queued", replicas=8)  # holds nothing
    other = WorkloadFactory(state="running", resources={"a100-80gb": 5}).tenant
    with django_assert_num_queries(1) as captured:  # no inventory: what the portal saw run
        held, running = usage_by_tenant([team.pk, other.pk])
    assert (held[team.pk], held[other.pk]) == ({"a100-80gb": 61, "l40s-48gb": 5}, {"a100-80gb": 5})
    assert (running[team.pk], running[other.pk]) == (
        {"a100-80gb": 60, "l40s-48gb": 3},
        {"a100-80gb": 5},
    )
    assert "GROUP BY" in captured.captured_queries[0]["sql"]


def test_a_lenders_line_names_five_borrowers_and_counts_the_rest():
    """Every lender's line naming every borrower made the Queues page grow as teams²."""
    line = {"flavor": "h100-80gb", "resource": "nvidia.com/gpu", "lent": 2}
    few = {("h100-80gb", "nvidia.com/gpu"): {"borrowers": {"a": 1, "b": 2}}}
    assert with_lent_to({"lines": [line]}, few)["lines"][0]["lent_to"] == "a (1) and b (2)"
    many = {f"t{i:03d}": 1 + i % 2 for i in range(300)}
    cohort = {("h100-80gb", "nvidia.com/gpu"): {"borrowers": many}}
    said = with_lent_to({"lines": [line]}, cohort)["lines"][0]["lent_to"]
    assert said == "t000 (1), t001 (2), t002 (1), t003 (2), t004 (1) and 295 more teams (443)"


def test_events_map_to_workloads_by_name_as_the_scan_of_the_namespace_did():
    """touched_workloads looks each name's possible bases up, not every workload per event."""
    live = [
        watching.LiveRef(1, "ns", "train"),
        watching.LiveRef(2, "ns", "train-big"),
        watching.LiveRef(3, "ns", "serve-7"),
        watching.LiveRef(4, "other", "train"),
    ]
    names = ["train", "train-big-x1", "job-train-abcde", "pod-serve-7-6b9f-x2-abc", "trainer-1",
             "pod-", "-train", "serve"]  # fmt: skip
    for name in names:
        event = {"reason": "Preempted", "involvedObject": {"name": name, "namespace": "ns"}}
        touched = watching.touched_workloads({"Event": [{"type": "ADDED", "object": event}]}, live)
        scanned = {r.pk for r in live if r.namespace == "ns" and sync.named_after(name, r.k8s_name)}
        assert touched.ids == scanned, name
    big = [watching.LiveRef(i, "ns", f"w{i}") for i in range(2000)]
    event = {"reason": "Preempted", "involvedObject": {"name": "pod-w7-x-1", "namespace": "ns"}}
    assert watching.touched_workloads({"Event": [{"object": event}]}, big).ids == {7}


def team_queue_status(*, borrowed=0, lent=0, pending=0, active=True):
    line = {"flavor": "h100-80gb", "resource": "nvidia.com/gpu", "nominal": 4, "used": 4}
    return {
        "queue": "q",
        "lines": [{**line, "borrowed": borrowed, "lent": lent}],
        "pending": pending,
        "admitted": 1,
        "active": active,
        "reason": "",
    }


def add_teams(start, stop, **queue):
    """Teams q{start}..q{stop-1}, each with the same stored queue summary (a few statements)."""
    teams = Tenant.objects.bulk_create(
        Tenant(slug=f"q{i:04d}", name=f"Queue team {i}") for i in range(start, stop)
    )
    TenantSyncState.objects.bulk_create(
        TenantSyncState(tenant=t, queue_status=team_queue_status(**queue)) for t in teams
    )


@pytest.mark.django_db
def test_the_queues_page_reads_every_team_in_one_query_and_lists_a_page_of_them(
    client, django_assert_max_num_queries
):
    """A card per team made the Queues page 0.7 MB and 0.5-4 s at 1,000 teams (issue 55): it
    lists PER_PAGE teams, with the same queries however many teams there are."""
    client.force_login(PlatformAdminFactory())
    add_teams(0, 3, pending=2)
    url = reverse("console:queues")
    client.get(url)  # the session and the user's groups, read once
    with django_assert_max_num_queries(10) as few:
        assert client.get(url).status_code == 200
    add_teams(3, 3 * queue_board.PER_PAGE, pending=2)
    with django_assert_max_num_queries(len(few)) as many:
        body = client.get(url).content.decode()
    assert len(many) == len(few)
    assert body.count('<section class="card" aria-labelledby="q-') == queue_board.PER_PAGE
    assert f"{3 * queue_board.PER_PAGE} teams, 0 not read" in body  # the sums are of them all
    assert f"{2 * 3 * queue_board.PER_PAGE} workloads waiting" in body
    assert "page 1 of 3" in body
    last = client.get(url, {"page": 3}).content.decode()
    assert f'aria-labelledby="q-q{3 * queue_board.PER_PAGE - 1:04d}"' in last


@pytest.mark.django_db
def test_a_page_of_lenders_says_whom_they_lend_to_from_every_team_and_filters_count_all():
    add_teams(0, 3, borrowed=2)  # q0000..q0002 borrow, on page 1 by slug
    add_teams(3, queue_board.PER_PAGE + 3, lent=1)  # lenders on pages 1 and 2
    Tenant.objects.filter(slug="q0001").update(status=Tenant.Status.ARCHIVED)  # not on the page
    board = queue_board.read_board(page=2)
    assert [t.slug for t in board.page] == ["q0051", "q0052"]
    line = board.page[0].queue["lines"][0]
    assert line["lent_to"] == "q0000 (2) and q0002 (2)"  # borrowers on another page
    assert board.teams == queue_board.PER_PAGE + 2
    assert board.counts == {
        "": board.teams, "waiting": 0, "borrowing": 2, "lending": queue_board.PER_PAGE,
        "not_admitting": 0, "unread": 0,
    }  # fmt: skip
    lending = queue_board.read_board(show="lending", search="Queue team 5")
    assert [t.slug for t in lending.page] == ["q0005"] + [f"q{i:04d}" for i in range(50, 53)]
    assert lending.listed == 4 and lending.page.paginator.num_pages == 1


def test_which_queues_each_filter_shows():
    waits, stopped = team_queue_status(pending=3), team_queue_status(active=False)
    borrows, lends = team_queue_status(borrowed=1), team_queue_status(lent=1)
    assert [k for k in queue_board.SHOWS if queue_board.shown(waits, k)] == ["", "waiting"]
    assert [k for k in queue_board.SHOWS if queue_board.shown(stopped, k)] == ["", "not_admitting"]
    assert [k for k in queue_board.SHOWS if queue_board.shown(borrows, k)] == ["", "borrowing"]
    assert [k for k in queue_board.SHOWS if queue_board.shown(lends, k)] == ["", "lending"]
    assert [k for k in queue_board.SHOWS if queue_board.shown({}, k)] == ["", "unread"]


def test_the_cohorts_sentence_names_five_of_each_side_and_counts_the_rest():
    """Naming every borrower and lender made the cohort's one sentence 300 names long at 1,000
    teams; the Borrowing and Lending filters list them all."""
    borrowers = {f"b{i:03d}": 2 for i in range(300)}
    lenders = {f"l{i:03d}": 1 for i in range(200)}
    cohort = {("h100-80gb", "nvidia.com/gpu"): {"borrowers": borrowers, "lenders": lenders}}
    assert cohort_lines(cohort) == [
        "h100-80gb nvidia.com/gpu: b000 (2), b001 (2), b002 (2), b003 (2), b004 (2) and 295 more"
        " teams (590) borrow 600, lent by l000 (1), l001 (1), l002 (1), l003 (1), l004 (1) and"
        " 195 more teams (195); 400 of it is capacity no team holds."
    ]
    two = {("h100-80gb", "nvidia.com/gpu"): {"borrowers": {"b": 2}, "lenders": {"a": 2}}}
    assert cohort_lines(two) == ["h100-80gb nvidia.com/gpu: b borrows 2, lent by a."]


@pytest.mark.django_db
def test_the_team_page_counts_its_waiting_workloads_without_a_grouped_subquery(
    client, django_assert_max_num_queries
):
    """`GROUP BY tenant ... LIMIT 1` had PostgreSQL scan the whole workload table for the count
    (41 of the team page's ~130 ms at 50,000 workloads): a plain COUNT over the team's rows,
    in the same single query as the first five, whatever the number waiting."""
    member = MembershipFactory(role="member")
    team = member.tenant
    TenantSyncState.objects.create(tenant=team, queue_status=team_queue_status(pending=3))
    for _ in range(3):
        WorkloadFactory(tenant=team, state="queued")
    client.force_login(member.user)
    url = reverse("team_detail", args=[team.slug])
    client.get(url)
    with django_assert_max_num_queries(30) as few:
        client.get(url)
    for _ in range(30):
        WorkloadFactory(tenant=team, state="queued")
    with django_assert_max_num_queries(len(few)) as many:
        body = client.get(url).content.decode()
    assert len(many) == len(few) and "(33 wait in all)" in body
    [waiting] = [q["sql"] for q in many if "unplaced_total" in q["sql"]]
    assert "GROUP BY" not in waiting and "LIMIT 5" in waiting


@pytest.mark.django_db
def test_a_teams_latest_workloads_are_read_in_index_order_not_sorted():
    """The team page's latest ten and the workload list's pages: an index on (tenant, newest
    first), so a big team's 10,000 workloads are not sorted for each (18 ms at 50,000)."""
    team = WorkloadFactory().tenant
    latest = [
        Workload.objects.filter(tenant=team).order_by("-created_at")[:10],  # the team page
        Workload.objects.filter(tenant=team)[:25],  # the list, in the model's ordering
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        # a table of one row is scanned whole, and sorting one row costs what reading an
        # index in order does (the planner chose either from run to run): ask for the plan as
        # for a big table, where a sort is dear. A Sort is left only where no index gives the
        # order.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        plans = [qs.explain() for qs in latest]
    for plan in plans:
        assert "Sort" not in plan and "Index Scan" in plan, plan
