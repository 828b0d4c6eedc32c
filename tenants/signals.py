from django.dispatch import Signal

# Sent after commit when what a tenant should have on the cluster may have changed
# (grants, memberships, status). Kwargs: tenant_id. The scheduler app listens.
desired_state_changed = Signal()

# Sent after commit when a policy that shapes every tenant's cluster objects changed (a pool's
# borrowing or lending). No kwargs. The scheduler app reconciles all tenants.
fleet_policy_changed = Signal()
