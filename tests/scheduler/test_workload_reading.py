"""The sync's cluster-wide reading without the cluster (pure): when a run reads the cluster whole
instead of namespace by namespace, and how the cluster-wide lists are spread into one reading
per namespace, with the calls they cost whatever the number of namespaces; how a reading is
kept up to date by the watches' later events, and handed from one run of a worker to its next."""

from collections import Counter
from datetime import timedelta

from django.utils import timezone

from scheduler.workloads.lifecycle.reading import (
    EVENT_REASONS,
    KeptReadings,
    apply_changes,
    read_namespace,
    read_wide,
    reads_wide,
)


def obj(kind, name, namespace, **extra):
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, **extra}}


class Cluster:
    """Cluster-wide lists, counted (from the reading's threads); a GET would be a defect of a
    wide reading."""

    def __init__(self, namespaces):
        self.calls = Counter()
        self.items = {
            "Pod": [
                obj("Pod", f"p-{ns}", ns, labels={"gpu-portal.io/workload": str(i)})
                for i, ns in enumerate(namespaces)
            ]
            + [obj("Pod", "outside", namespaces[0])],
            "KueueWorkload": [obj("KueueWorkload", f"job-j-{ns}", ns) for ns in namespaces],
            "Job": [obj("Job", "j", ns) for ns in namespaces],
            "Deployment": [obj("Deployment", "coredns", "kube-system")],
        }
        self.events = [
            {**obj("Event", f"e-{r}", namespaces[0]), "reason": r} for r in EVENT_REASONS
        ]

    def list(self, kind, namespace=None, *, label_selector="", field_selector=""):
        assert namespace is None and not label_selector
        self.calls[("list", kind)] += 1
        if kind == "Event":
            reason = field_selector.removeprefix("reason=")
            return [e for e in self.events if e["reason"] == reason]
        return self.items[kind]

    def get(self, kind, name, namespace=None):
        raise AssertionError(f"a GET of {kind} {namespace}/{name}")


def test_a_run_reads_wide_from_enough_namespaces_and_a_quarter_of_those_with_live_work():
    assert not reads_wide(7, 7, wide_from=8)
    assert reads_wide(8, 8, wide_from=8)
    assert reads_wide(8, 32, wide_from=8)
    assert not reads_wide(8, 33, wide_from=8)  # 8 of 33 changed: reading all would cost more
    assert not reads_wide(0, 0, wide_from=0)  # nothing to read: nothing is read


def test_a_wide_reading_costs_the_same_calls_for_3_or_300_namespaces():
    costs = []
    for n in (3, 300):
        namespaces = [f"team-{i}" for i in range(n)]
        cluster = Cluster(namespaces)
        readings = read_wide(cluster, namespaces + ["quiet"])
        costs.append(dict(cluster.calls))
        assert set(readings) == {*namespaces, "quiet"}
        assert sum(len(r.queue_workloads) for r in readings.values()) == n
    assert costs[0] == costs[1]
    assert sum(costs[0].values()) == 4 + len(EVENT_REASONS)


def test_each_namespace_gets_its_own_objects_and_nothing_of_the_others():
    cluster = Cluster(["a", "b"])
    readings = read_wide(cluster, ["a", "b", "quiet"])
    a, quiet = readings["a"], readings["quiet"]
    assert a.pods == {"0": [cluster.items["Pod"][0]]}  # the portal's, by workload id
    assert {p["metadata"]["name"] for p in a.all_pods} == {"p-a", "outside"}
    assert [w["metadata"]["name"] for w in a.queue_workloads] == ["job-j-a"]
    assert {e["reason"] for e in a.observed_events()} == set(EVENT_REASONS)
    # its Job from the list: no GET; one it does not hold does not exist
    assert a.object(cluster, "Job", "j", "a") == cluster.items["Job"][0]
    assert a.object(cluster, "Job", "gone", "a") is None
    assert a.object(cluster, "Pod", "outside", "a")["metadata"]["name"] == "outside"
    assert (quiet.pods, quiet.queue_workloads, quiet.events) == ({}, [], [])
    assert quiet.object(cluster, "Deployment", "coredns", "quiet") is None


def at(item, rv, uid="u1", type_="MODIFIED", **extra):
    item = {**item, **extra, "metadata": {**item["metadata"], "resourceVersion": rv, "uid": uid}}
    return {"type": type_, "object": item}


def test_a_reading_is_kept_up_to_date_by_later_events_and_not_taken_back_by_older_ones():
    cluster = Cluster(["team-a", "team-b"])
    readings = read_wide(cluster, ["team-a", "team-b"])
    pod = obj("Pod", "p-team-a", "team-a", labels={"gpu-portal.io/workload": "0"})
    new_pod = obj("Pod", "p2", "team-a", labels={"gpu-portal.io/workload": "7"})
    queued = obj("KueueWorkload", "job-j-team-a", "team-a")
    preempted = {**obj("Event", "e-new", "team-a"), "reason": sorted(EVENT_REASONS)[0]}
    apply_changes(
        readings,
        {
            "Pod": [
                at(pod, "20", status={"phase": "Running"}),
                at(pod, "15", status={"phase": "Pending"}),  # arrived as it was listed: older
                at(new_pod, "21", type_="ADDED"),
            ],
            # the listed one's uid (these made-up lists carry none)
            "KueueWorkload": [at(queued, "22", uid=None, type_="DELETED")],
            "Event": [
                at(preempted, "23", type_="ADDED"),
                at({**obj("Event", "e-other", "team-a"), "reason": "Pulled"}, "24", type_="ADDED"),
            ],
            "Job": [at(obj("Job", "j", "team-b"), "25", status={"active": 1})],
        },
    )
    a, b = readings["team-a"], readings["team-b"]
    assert a.pods["0"][0]["status"] == {"phase": "Running"}
    assert a.pods["7"][0]["metadata"]["name"] == "p2"
    assert {p["metadata"]["name"] for p in a.all_pods} == {"p-team-a", "outside", "p2"}
    assert a.queue_workloads == [] and a.place(queued) is None
    assert "e-new" in {e["metadata"]["name"] for e in a.observed_events()}
    assert "e-other" not in {e["metadata"]["name"] for e in a.events}
    assert b.objects["Job"]["j"]["status"] == {"active": 1}
    assert cluster.calls == Counter(
        {("list", k): 1 for k in ("Pod", "KueueWorkload", "Job", "Deployment")}
    ) + Counter({("list", "Event"): len(EVENT_REASONS)})


def test_a_deletion_removes_only_the_object_it_names_and_other_namespaces_are_left_alone():
    cluster = Cluster(["team-a"])
    readings = read_wide(cluster, ["team-a"])
    pod = obj("Pod", "p-team-a", "team-a", labels={"gpu-portal.io/workload": "0"})
    apply_changes(readings, {"Pod": [at(pod, "30", uid="u-new", type_="ADDED")]})
    # the older pod of the same name, deleted: not the one made again after it
    apply_changes(readings, {"Pod": [at(pod, "31", uid="u-old", type_="DELETED")]})
    assert readings["team-a"].objects["Pod"]["p-team-a"]["metadata"]["uid"] == "u-new"
    apply_changes(readings, {"Pod": [at(pod, "32", uid="u-new", type_="DELETED")]})
    assert "0" not in readings["team-a"].pods
    apply_changes(readings, {"Pod": [at(obj("Pod", "z", "elsewhere"), "33", type_="ADDED")]})
    assert set(readings) == {"team-a"}


class Namespace(Cluster):
    """One namespace's lists, counted; a GET answers what the cluster holds, counted too."""

    def list(self, kind, namespace=None, *, label_selector="", field_selector=""):
        assert namespace == "a" and not (label_selector or field_selector)
        self.calls[("list", kind)] += 1
        if kind == "Event":
            return [*self.events, {**obj("Event", "pulled", "a"), "reason": "Pulled"}]
        return [i for i in self.items[kind] if i["metadata"]["namespace"] == "a"]

    def get(self, kind, name, namespace=None):
        self.calls[("get", kind)] += 1
        return obj(kind, name, namespace)


def test_a_namespace_reading_holds_its_jobs_and_deployments_so_no_workload_needs_a_get():
    cluster = Namespace(["a", "b"])
    reading = read_namespace(cluster, "a")
    assert cluster.calls == Counter(
        {("list", k): 1 for k in ("Pod", "Event", "KueueWorkload", "Job", "Deployment")}
    )
    assert reading.object(cluster, "Job", "j", "a") == cluster.items["Job"][0]
    long_ago = timezone.now() - timedelta(minutes=5)
    assert reading.object(cluster, "Deployment", "gone", "a", made=long_ago) is None
    assert not [call for call in cluster.calls if call[0] == "get"]
    # only the events `observe` reads are kept (a busy namespace has thousands of others)
    assert {e["reason"] for e in reading.events} == set(EVENT_REASONS)


def test_an_object_made_after_the_reading_is_taken_from_it_once_its_watch_brought_it():
    cluster = Namespace(["a"])
    reading = read_namespace(cluster, "a")
    just_now = timezone.now()
    # not held yet, made as the reading began: its event may be on its way, so one GET
    assert reading.object(cluster, "Job", "new", "a", made=just_now)["metadata"]["name"] == "new"
    assert cluster.calls[("get", "Job")] == 1
    apply_changes({"a": reading}, {"Job": [at(obj("Job", "new", "a"), "40", type_="ADDED")]})
    held = reading.object(cluster, "Job", "new", "a", made=just_now)
    assert held["metadata"]["resourceVersion"] == "40"
    assert cluster.calls[("get", "Job")] == 1  # from the reading now


def test_a_run_takes_the_last_runs_readings_only_from_the_cursors_they_are_up_to_date_with():
    kept, readings = KeptReadings(), {"a": read_namespace(Namespace(["a"]), "a")}
    kept.keep({"Pod": "10", "KueueWorkload": None}, readings)
    assert kept.take({"Pod": "10", "KueueWorkload": None}) is readings
    assert kept.take({"Pod": "10", "KueueWorkload": None}) == {}  # taken: one run holds them
    kept.keep({"Pod": "10"}, readings)
    # another worker ran in between (the cursors moved on without these readings): none
    assert kept.take({"Pod": "12"}) == {}
    assert kept.take({"Pod": "10"}) == {}  # and they are gone, not left for a later match
