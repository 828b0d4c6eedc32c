"""Make the cluster match what PostgreSQL says each tenant is granted (level-triggered).

Desired state is rendered by `scheduler.cluster.render`; import each name from the module that
holds it:

- `specs`: TenantSpecs and the cluster's FlavorSpecs and PriorityClassSpecs from the database,
  `tenant_namespace`, and which LocalQueues are held (the `queue_holds` hook).
- `converge`: desired vs live (`plan_converge`, pure), apply and prune (`converge`), drift, and
  what this instance owns (`managed_selector`).
- `cohorts`: a Kueue Cohort per department (`reconcile_cohorts`), pruned when it is deleted.
- `runs`: the entry points a task calls (`reconcile_tenant`, `reconcile_cluster_objects`,
  `reconcile_all`), the tenant lock, and the record of each run.
"""
