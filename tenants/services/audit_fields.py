"""The fields of each governance row that its audit events snapshot (`audit.snapshot`), one
list per model so that every service records the same before and after."""

from __future__ import annotations

REQUEST_FIELDS = ["state", "starts_at", "ends_at", "decided_by", "decision_comment"]
TENANT_FIELDS = ["slug", "name", "status", "cost_centre", "gpu_ceiling", "monthly_budget"]
GRANT_FIELDS = ["resource_class", "amount", "starts_at", "ends_at", "state", "placement"]
