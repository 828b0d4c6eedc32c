"""What an API token may do: one word per kind of action. Every room's API names the scope its
writes need (`write_scope`), so the words live on the ground floor; governance's `ApiToken`
stores them and checks them."""

from django.db import models


class TokenScope(models.TextChoices):
    READ = "read", "Read"
    REQUEST = "request", "Ask for capacity"
    SUBMIT = "submit", "Submit and cancel workloads"
    APPROVE = "approve", "Approve (platform admins)"
    # Platform automation: tenants, memberships, pools and policy. Only a platform admin's
    # token may carry it, minted by a platform admin; it covers every other scope too.
    ADMIN = "admin", "Administer the platform (platform admins)"
