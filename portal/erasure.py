"""Erasing a departed person: their personal data replaced by a pseudonym (`erased-<id>`) in
every table, the audit chain still valid.

Their account is renamed and closed (no names, no e-mail, no password, no groups), their single
sign-on identities, sessions, idempotency records and sign-in logs (IPs, user agents) deleted,
their memberships removed (the cluster's RoleBindings follow on the next reconcile) and tokens
revoked. Then the rows that are theirs (a foreign key names them: what they asked, submitted,
wrote or were given; in the audit log, what they did and what was done to them) have every match
of their username, e-mail, names and single sign-on subjects, as a whole word, replaced by the
pseudonym in every text and JSON field; other rows only lose their e-mail address and subjects,
which are no ordinary words: a name that is also a word (`read`, `ops`) is never rewritten in
another team's scopes, specs or channel targets. Fields that name things in the cluster (slugs,
namespaces, pod and Kubernetes names) are never rewritten: the run reports what is left in them.
In the audit log, the rows rewritten lose their content's salt and point at the one
`person.erased` event (tenants/audit_chain.py), so the chain still verifies.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import models, transaction
from django.db.models.functions import Cast

from core import audit
from core.errors import InvalidInput, NotFound
from core.models import IdempotencyRecord
from core.permissions import require_platform_admin
from portal.models import OIDCIdentity
from tenants import audit_chain
from tenants.models import AuditEvent, Membership, Tenant
from tenants.services.follow_up import notify_desired_state_changed
from tenants.services.tokens import revoke_robot_tokens_made_by, revoke_tokens_of

# Shorter names are not searched alone (they would rewrite words of other people's text); the
# full name still is.
MIN_IDENTIFIER = 3
_CLUSTER_NAMES = {"namespace", "k8s_name", "k8s_uid", "uid", "pod_uid", "pod_name", "node_name"}
# Handled on their own (above) or closed vocabularies that hold nobody's data.
_SKIP = {"auth.user", "tenants.auditevent", "sessions.session", "auth.permission"}
_SKIP |= {"contenttypes.contenttype", "axes.accessattempt", "axes.accesslog"}
_SKIP |= {"axes.accessfailurelog", "axes.accessattemptexpiration"}
_SIGN_IN_LOGS = ("axes.AccessAttempt", "axes.AccessLog", "axes.AccessFailureLog")


@dataclass
class Erasure:
    user_id: int
    pseudonym: str
    rewritten: Counter = field(default_factory=Counter)  # "app.Model": rows
    deleted: Counter = field(default_factory=Counter)
    left: Counter = field(default_factory=Counter)  # "app.Model.field": rows, cluster names
    teams: list[str] = field(default_factory=list)
    tokens_revoked: int = 0


def identifiers(user, subjects: list[str]) -> list[str]:
    """What names the person, longest first (so an e-mail goes before the username in it)."""
    found = {user.get_username(), user.email, user.get_full_name(), *subjects}
    found |= {user.first_name, user.last_name}
    return sorted({i.strip() for i in found if len(i.strip()) >= MIN_IDENTIFIER}, key=len)[::-1]


def unique_identifiers(user, subjects: list[str]) -> list[str]:
    """What names the person and nothing else: their e-mail and single sign-on subjects."""
    found = {user.email, *subjects}
    return sorted({i.strip() for i in found if len(i.strip()) >= MIN_IDENTIFIER}, key=len)[::-1]


def theirs(model: type[models.Model], user, username: str) -> models.Q | None:
    """The rows of `model` that are the person's: a foreign key to them (the audit log: what
    they did, and what was done to them, by its object or by the `user` it names: `username`,
    their name before the erasure renamed them)."""
    if model is AuditEvent:
        found = (
            models.Q(actor_id=user.pk)
            | models.Q(object_type=user._meta.label, object_id=str(user.pk))
            | models.Q(before__user=username)
            | models.Q(after__user=username)
        )
        for other in apps.get_models():  # what was done to their rows: a token revoked, …
            own = None if other is AuditEvent else theirs(other, user, username)
            if own is not None:
                pks = other._base_manager.filter(own).values_list("pk", flat=True)
                found |= models.Q(
                    object_type=other._meta.label, object_id__in=[str(pk) for pk in pks]
                )
        return found
    keys = [
        f for f in model._meta.concrete_fields if f.is_relation and f.related_model is type(user)
    ]
    found = models.Q()
    for f in keys:
        found |= models.Q(**{f.attname: user.pk})
    return found if keys else None


def pattern_for(names: list[str]) -> re.Pattern[str]:
    words = "|".join(re.escape(name) for name in names)
    return re.compile(rf"(?<!\w)(?:{words})(?!\w)", re.IGNORECASE)


def scrub(value: Any, pattern: re.Pattern[str], pseudonym: str) -> Any:
    """`value` with every whole-word match replaced, inside JSON too (keys and values)."""
    if isinstance(value, str):
        return pattern.sub(pseudonym, value)
    if isinstance(value, list):
        return [scrub(v, pattern, pseudonym) for v in value]
    if isinstance(value, dict):
        return {
            scrub(k, pattern, pseudonym): scrub(v, pattern, pseudonym) for k, v in value.items()
        }
    return value


def text_fields(model: type[models.Model]) -> list[models.Field]:
    return [
        f
        for f in model._meta.concrete_fields
        if isinstance(f, (models.CharField, models.TextField, models.JSONField))
        and not f.primary_key
    ]


def _structural(f: models.Field) -> bool:
    return (
        isinstance(f, models.SlugField) or f.unique or bool(f.choices) or f.name in _CLUSTER_NAMES
    )


def matching(model: type[models.Model], fields: list[models.Field], names: list[str]):
    """Rows of `model` where any of `fields` holds any of `names` (case-insensitive)."""
    rows = model._base_manager.all()
    found = models.Q()
    for f in fields:
        lookup = f.name
        if isinstance(f, models.JSONField):
            lookup = f"erase_text_{f.name}"
            rows = rows.annotate(**{lookup: Cast(f.name, models.TextField())})
        for name in names:
            found |= models.Q(**{f"{lookup}__icontains": name})
    return rows.filter(found) if fields and names else rows.none()


def _rewrite(rows, fields: list[models.Field], pattern, pseudonym: str) -> list[tuple[int, dict]]:
    changes = []
    for row in rows.values("pk", *[f.name for f in fields]):
        changed = {}
        for f in fields:
            new = scrub(row[f.name], pattern, pseudonym)
            if isinstance(new, str) and getattr(f, "max_length", None):
                new = new[: f.max_length]
            if new != row[f.name]:
                changed[f.name] = new
        if changed:
            changes.append((row["pk"], changed))
    return changes


@dataclass(frozen=True)
class _Person:
    """Whom an erasure rewrites, and how: every identifier in their own rows (`names`,
    `pattern`), only those that are no ordinary words in the rest (`unique`, `unique_pattern`)."""

    user: Any
    username: str  # as it was: the erasure renames them before it rewrites
    names: list[str]
    pattern: re.Pattern[str]
    unique: list[str]
    unique_pattern: re.Pattern[str] | None
    pseudonym: str

    def rows(self, model, fields) -> list[tuple[Any, re.Pattern[str]]]:
        """(rows, pattern): theirs with every identifier, the others' with the unique ones."""
        own = theirs(model, self.user, self.username)
        found = []
        if own is not None:
            found.append((matching(model, fields, self.names).filter(own), self.pattern))
        if self.unique_pattern is not None:
            others = matching(model, fields, self.unique)
            found.append((others.exclude(own) if own is not None else others, self.unique_pattern))
        return found


def _rewrite_tables(person: _Person, result: Erasure) -> None:
    for model in apps.get_models():
        if model._meta.label_lower in _SKIP:
            continue
        fields = text_fields(model)
        free = [f for f in fields if not _structural(f)]
        for rows, pattern in person.rows(model, free):
            for pk, changed in _rewrite(rows, free, pattern, person.pseudonym):
                model._base_manager.filter(pk=pk).update(**changed)
                result.rewritten[model._meta.label] += 1
        own = theirs(model, person.user, person.username)
        for f in fields if own is not None else ():
            if _structural(f) and (count := matching(model, [f], person.names).filter(own).count()):
                result.left[f"{model._meta.label}.{f.name}"] = count


def _refuse(actor, user) -> None:
    if user.get_username() == f"erased-{user.pk}":
        raise InvalidInput(f"{user.get_username()} is already erased")
    if Tenant.objects.filter(robot=user).exists():
        raise InvalidInput(f"{user.get_username()} is a team's robot account, not a person")
    admins = get_user_model().objects.filter(is_active=True).exclude(pk=user.pk)
    admins = admins.filter(
        models.Q(is_superuser=True)
        | models.Q(is_staff=True, groups__name=settings.PLATFORM_ADMIN_GROUP)
    )
    is_admin = user.is_active and (
        user.is_superuser
        or (user.is_staff and user.groups.filter(name=settings.PLATFORM_ADMIN_GROUP).exists())
    )
    if is_admin and not admins.exists():
        who = "you are" if actor is not None and actor.pk == user.pk else f"{user} is"
        raise InvalidInput(
            f"{who} the last platform admin: make someone else a platform admin first"
        )


def _close_account(user, result: Erasure) -> None:
    for membership in Membership.objects.filter(user=user).select_related("tenant"):
        result.teams.append(membership.tenant.slug)
        notify_desired_state_changed(membership.tenant)
        membership.delete()
    result.tokens_revoked = revoke_tokens_of(user, reason="its holder's data was erased")
    # the CI robot tokens they made, in any team (one they left before kept none alive)
    made_for = Tenant.objects.filter(robot__api_tokens__created_by=user).distinct()
    for tenant in made_for:
        result.tokens_revoked += revoke_robot_tokens_made_by(
            user=user, tenant=tenant, why="was erased"
        )
    for label, rows in (
        ("portal.OIDCIdentity", OIDCIdentity.objects.filter(user=user)),
        ("core.IdempotencyRecord", IdempotencyRecord.objects.filter(user=user)),
    ):
        result.deleted[label] = rows.delete()[0]
    sessions = [s.pk for s in Session.objects.iterator() if _session_of(s, user)]
    result.deleted["sessions.Session"] = Session.objects.filter(pk__in=sessions).delete()[0]


def _session_of(session: Session, user) -> bool:
    return str(session.get_decoded().get("_auth_user_id")) == str(user.pk)


def _delete_sign_in_logs(names: list[str], result: Erasure) -> None:
    for label in _SIGN_IN_LOGS:
        if apps.is_installed(label.split(".")[0]):
            model = apps.get_model(label)
            found = models.Q()
            for name in names:
                found |= models.Q(username__iexact=name)
            result.deleted[label] = model._base_manager.filter(found).delete()[0]


def _erase_from_audit(person: _Person, event_id: int) -> int:
    fields = [f for f in text_fields(AuditEvent) if f.name in audit_chain.CONTENT_FIELDS]
    audit_chain.allow("erasure")
    rewritten = 0
    for rows, pattern in person.rows(AuditEvent, fields):
        rows = rows.exclude(pk=event_id)
        sealed = set(rows.filter(chain_seq__isnull=False).values_list("pk", flat=True))
        for pk, changed in _rewrite(rows, fields, pattern, person.pseudonym):
            if pk in sealed:  # its content can no longer be checked: say by which erasure
                changed.update(content_salt="", erased_by=event_id)
            AuditEvent.objects.filter(pk=pk).update(**changed)
            rewritten += 1
    return rewritten


def erase_person(*, actor, username: str, dry_run: bool = False) -> Erasure:
    """Erase the person `username` (platform admins only; `actor` None: the command line).
    A dry run does it all, reports, and rolls back."""
    if actor is not None:
        require_platform_admin(actor, "erase a person's data")
    user_model = get_user_model()
    with transaction.atomic():
        user = user_model.objects.select_for_update().filter(username=username).first()
        if user is None:
            raise NotFound(f"no user named {username!r}")
        _refuse(actor, user)
        audit_chain.lock_chain()
        audit_chain.seal_locked()  # every row committed so far is checked up to here
        subjects = list(OIDCIdentity.objects.filter(user=user).values_list("subject", flat=True))
        names, unique = identifiers(user, subjects), unique_identifiers(user, subjects)
        pseudonym = f"erased-{user.pk}"
        person = _Person(
            user=user,
            username=username,
            names=names,
            pattern=pattern_for(names),
            unique=unique,
            unique_pattern=pattern_for(unique) if unique else None,
            pseudonym=pseudonym,
        )
        result = Erasure(user_id=user.pk, pseudonym=pseudonym)
        _close_account(user, result)
        _delete_sign_in_logs(names, result)
        user.username, user.first_name, user.last_name, user.email = pseudonym, "", "", ""
        user.is_active = user.is_staff = user.is_superuser = False
        user.set_unusable_password()
        user.save()
        user.groups.clear()
        user.user_permissions.clear()
        _rewrite_tables(person, result)
        event = audit.record(
            actor=user if actor is not None and actor.pk == user.pk else actor,  # renamed
            verb=audit_chain.ERASED_VERB,
            obj=user,
            tenant=None,
            after={
                "pseudonym": pseudonym,
                "rewritten": dict(result.rewritten),
                "deleted": {k: v for k, v in result.deleted.items() if v},
                "teams": result.teams,
                "tokens_revoked": result.tokens_revoked,
                "left_in_cluster_names": dict(result.left),
            },
        )
        result.rewritten["tenants.AuditEvent"] = _erase_from_audit(person, event.pk)
        if dry_run:
            transaction.set_rollback(True)
    return result
