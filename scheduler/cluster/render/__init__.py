"""Desired cluster state as plain manifests: pure functions, no I/O, no Django.

One module per kind of object; import each name from the module that holds it:

- `labels`: the portal's labels and annotations, Kueue's names, the kinds prune looks at, the
  content hash every object carries (`_finish`) and `object_key`.
- `specs`: `TenantSpec`, `Member`, `QueueLine`, `FlavorSpec`, `PriorityClassSpec` (what render
  reads) and the metadata of a tenant's objects.
- `namespace`: the Namespace, its ResourceQuotas and LimitRange.
- `access`: the robot's ServiceAccount, the portal's Roles and RoleBindings (`role_rules`).
- `network`: the NetworkPolicy (`egress_blocks`).
- `kueue`: a tenant's ClusterQueue and LocalQueue, the ResourceFlavors.
- `priorities`: PriorityClasses and Kueue's WorkloadPriorityClasses.
- `queue_guard`: the ValidatingAdmissionPolicy that closes what Kueue leaves open.
- `device_guard`: its rules for a team's own DRA claims and claim templates.
- `tenant`: `render_tenant(spec)`, everything one tenant should have, in order.
- `multikueue`: a fleet manager's AdmissionChecks, MultiKueueConfigs and MultiKueueClusters, a
  worker's kubeconfig Secret copy, a ClusterQueue's admission checks.
"""
