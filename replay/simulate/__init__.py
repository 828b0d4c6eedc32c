"""Part "simulate" of the replay: the trace at trace time, in pure Python, no cluster.

The portal's own code decides wherever the portal decides (grant sizing in `replay.workload`,
the MIG planner, the ClusterQueues, flavors and priority classes as `scheduler.cluster.render`
renders them); Kueue and kube-scheduler are modelled from their documented semantics, one module
each. What the harness adds on the real cluster (latencies, Kueue's one head per queue per
cycle, requeue batching, whole-second timestamps) is a named parameter of `engine.Harness`,
all zero for the policy rows.

- `queues`: ClusterQueues, quotas and Workloads as the Kueue model holds them.
- `kueue`: ClusterQueues and their cohort, built from the rendered manifests; admission cycle,
  borrowing and lending, fair-sharing order when configured.
- `preemption`: classic and fair-sharing preemption, and the issue's reclaim policy (a grace
  before reclaim, victims by least work lost).
- `scheduler`: nodes, their GPUs as MIG instances, whole GPUs or time-sliced replicas; binding
  by MostAllocated.
- `dra`: the DRA row's nodes: GPUs as counter sets, each pod's MIG placement allocated first
  fit when it binds (issue 53).
- `engine`: the event loop at trace time and what it measures.
- `fleet`: one policy on one fleet, set up the way part 1 sets it up on the cluster.
- `slice_quota`: the rows' GPU-equivalent quotas (f…j), slice counts read from the catalog.
- `rows`: row 0, a…e and the what-ifs f…m, the search for the smallest fleet that carries
  the trace, the fairness metric.
- `report`: the table; `goals`: issue 29's goals row by row, and issue 53's for the DRA row.
"""
