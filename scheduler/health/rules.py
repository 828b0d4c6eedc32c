"""The GPU health policy's rules as the platform team edits them: the default policy on a fresh
install, the checks that a rule can fire and clear, and the audited save. What the rules make of
the readings is `policy.py` (pure)."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from core import audit
from core.errors import InvalidInput
from core.permissions import require_platform_admin
from scheduler.health import policy
from scheduler.health.models import HealthRule


def ensure_default_rules() -> int:
    """The default policy where there is none yet (a fresh install); returns rules created."""
    if HealthRule.objects.exists():
        return 0
    HealthRule.objects.bulk_create([HealthRule(**rule) for rule in policy.default_rules()])
    return len(policy.default_rules())


RULE_FIELDS = (
    "signal",
    "xid_code",
    "threshold",
    "clear_below",
    "action",
    "auto_recover",
    "clear_after_s",
    "waive_billing",
    "enabled",
)


def validate_rule(values: dict, *, instance: HealthRule | None = None) -> None:
    """A rule that can fire and clear: XID rules name a code once (or are the one catch-all);
    threshold rules have a threshold and clear at or below it."""
    if values["signal"] == HealthRule.Signal.XID:
        if values.get("threshold") is not None:
            raise InvalidInput("an XID rule has a code, not a threshold: leave threshold empty")
        same = HealthRule.objects.filter(signal="xid", xid_code=values.get("xid_code"))
        if instance is not None:
            same = same.exclude(pk=instance.pk)
        if same.exists():
            code = values.get("xid_code")
            raise InvalidInput(
                f"a rule for XID {code} exists already: edit that one"
                if code is not None
                else "a rule for every other XID exists already: edit that one"
            )
        return
    if values.get("xid_code") is not None:
        raise InvalidInput("only XID rules have a code: leave the XID code empty")
    threshold, clear_below = values.get("threshold"), values.get("clear_below")
    if threshold is None:
        raise InvalidInput(f"a {values['signal']} rule needs a threshold")
    if clear_below is not None and clear_below > threshold:
        raise InvalidInput(
            f"clear below ({clear_below}) must be at most the threshold ({threshold}), "
            "or the signal would clear while it fires"
        )


def save_rule(*, actor, values: dict, rule: HealthRule | None = None) -> HealthRule:
    require_platform_admin(actor, "edit the GPU health policy")
    validate_rule(values, instance=rule)
    with transaction.atomic():
        before = None
        if rule is not None:
            rule = HealthRule.objects.select_for_update().get(pk=rule.pk)
            before = {f: plain(getattr(rule, f)) for f in RULE_FIELDS}
        else:
            rule = HealthRule()
        for f in RULE_FIELDS:
            if f in values:
                setattr(rule, f, values[f])
        rule.save()
        audit.record(
            actor=actor,
            verb="health_rule.created" if before is None else "health_rule.changed",
            obj=rule,
            tenant=None,
            before=before,
            after={f: plain(getattr(rule, f)) for f in RULE_FIELDS},
        )
    return rule


def plain(value):
    return str(value) if isinstance(value, Decimal) else value
