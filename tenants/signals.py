from django.dispatch import Signal

# Sent after commit when what a tenant should have on the cluster may have changed
# (grants, memberships, status). Kwargs: tenant_id. The scheduler app listens.
desired_state_changed = Signal()
