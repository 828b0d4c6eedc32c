"""What teams run on the cluster, in rooms by concept:
- `services` (submit, cancel), `selectors` (reads for other layers), `models`, `tasks`;
- `submit/`: what a submit is checked against before anything is written (input, needs,
  placement, admission under the tenant's lock);
- `kinds/`: the kinds of work, rendered pure (job, gang, service, autoscaling, topology);
- `queue/`: a workload in the queue (why it waits and when it may start, reclaim after a grace,
  work above a lowered quota);
- `lifecycle/`: a workload's life on the cluster (create and sync, the periodic watch, idle
  suspension, leftovers, pods and logs);
- `pages/` and `api/`: the browser's pages and the REST API."""
