"""API tokens: issued with their secret shown once (only its sha256 is stored), revoked, and
checked on each call."""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core import audit
from core.errors import Forbidden, InvalidInput, InvalidTransition, NotFound
from core.permissions import is_platform_admin
from tenants.models import ApiToken, Tenant
from tenants.notifications import notify
from tenants.permissions import OWNER_ROLES, require_role, role_in

User = get_user_model()
log = logging.getLogger(__name__)

TOKEN_PREFIX = "gpp_"
TOKEN_FIELDS = ["name", "prefix", "scopes", "expires_at", "revoked_at"]


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _not_yours(username: str) -> Forbidden:
    return Forbidden(
        f"you may issue tokens only for yourself or the CI robot of a tenant you own; "
        f"{username!r} is neither",
        field="username",
    )


def token_holder(*, actor, username: str | None):
    """Whom a token asked for by `username` is for (default: the actor). Whether a user is
    missing or not the actor's to issue tokens for, the refusal is the same, so that it never
    confirms who exists; platform admins, who see every user, are told when one is missing."""
    if not username or username == actor.get_username():
        return actor
    user = User.objects.filter(username=username).first()
    if user is None:
        if is_platform_admin(actor):
            raise NotFound(f"no user {username!r}", field="username")
        raise _not_yours(username)
    return user


def issue_token(
    *,
    actor,
    user,
    name: str,
    scopes: list[str],
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for `user` and return it with its secret, which is never stored (only its
    sha256 is) and so is shown once. People issue tokens for themselves; owners of a tenant for
    its CI robot; platform admins and the system (actor None) for anyone. Only platform admins'
    tokens may carry `approve`."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("give the token a name", field="name")
    scopes = sorted(set(scopes or []))
    if not scopes:
        raise InvalidInput("a token needs at least one scope", field="scopes")
    unknown = set(scopes) - set(ApiToken.Scope.values)
    if unknown:
        raise InvalidInput(
            f"unknown scopes {', '.join(sorted(unknown))}; choose from "
            f"{', '.join(ApiToken.Scope.values)}",
            field="scopes",
        )
    # department admins approve their teams' asks too (within the department's quota)
    if ApiToken.Scope.APPROVE in scopes and not (
        is_platform_admin(user) or user.administered_departments.exists()
    ):
        raise InvalidInput(
            "only platform admins' and department admins' tokens may carry the approve scope",
            field="scopes",
        )
    if ApiToken.Scope.ADMIN in scopes:
        # Automation with the platform's authority: for platform admins, by platform admins
        # (or the system), never through another token (token creation is browser-only).
        if not is_platform_admin(user):
            raise InvalidInput(
                "only platform admins' tokens may carry the admin scope", field="scopes"
            )
        if actor is not None and not is_platform_admin(actor):
            raise Forbidden("only platform admins may issue tokens with the admin scope")
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise InvalidInput("the expiry must be in the future", field="expires_at")
    longest = longest_expiry(now)
    if expires_at is None:
        expires_at = longest  # every token ends: a forgotten CI secret does not live for ever
    elif expires_at > longest:
        raise InvalidInput(
            f"a token lives at most {settings.API_TOKEN_MAX_DAYS} days (setting "
            f"API_TOKEN_MAX_DAYS): choose an end before {longest:%Y-%m-%d}, and a new token then",
            field="expires_at",
        )
    # actor None: the system (manage.py issue_token), with the platform's authority.
    if actor is not None and user.pk != actor.pk and not is_platform_admin(actor):
        robot_of = Tenant.objects.filter(robot=user).first()
        # Another team's robot is refused as any other user is, not with a 404 for its team.
        if robot_of is None or role_in(actor, robot_of) is None:
            raise _not_yours(user.get_username())
        require_role(actor, robot_of, OWNER_ROLES, "issue tokens for the CI robot")
    raw = f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=raw[:12],
            token_hash=hash_token(raw),
            scopes=scopes,
            expires_at=expires_at,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        robot_tenant = Tenant.objects.filter(robot=user).first()
        audit.record(
            actor=actor,
            verb="api_token.issued",
            obj=token,
            tenant=robot_tenant,
            after={**audit.snapshot(token, TOKEN_FIELDS), "user": user.get_username()},
        )
    return token, raw


def longest_expiry(now: datetime) -> datetime:
    return now + timedelta(days=settings.API_TOKEN_MAX_DAYS)


def revoke_token(*, actor, token: ApiToken) -> ApiToken:
    if token.user_id != getattr(actor, "pk", None) and not is_platform_admin(actor):
        robot_of = Tenant.objects.filter(robot_id=token.user_id).first()
        if robot_of is None:
            raise Forbidden("you may revoke only your own tokens")
        require_role(actor, robot_of, OWNER_ROLES, "revoke the CI robot's tokens")
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is not None:
            raise InvalidTransition(f"token {token.prefix}… is already revoked")
        _revoke_locked(actor, token)
    return token


def _revoke_locked(actor, token: ApiToken, reason: str = "") -> None:
    """Revoke a token its caller locked, for every process at once, with its audit event
    (`reason`: why the system revoked it, where no person did)."""
    before = audit.snapshot(token, TOKEN_FIELDS)
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    # At once for every process, not after the cache's bound (see authenticate_token):
    # dropped now, and again on commit, as a call that read the row before this commit
    # may have cached it since.
    key = _cache_key(token.token_hash)
    _forget(key)
    transaction.on_commit(functools.partial(_forget, key))
    audit.record(
        actor=actor,
        verb="api_token.revoked",
        obj=token,
        tenant=Tenant.objects.filter(robot_id=token.user_id).first(),
        before=before,
        after={**audit.snapshot(token, TOKEN_FIELDS), **({"reason": reason} if reason else {})},
    )


def revoke_robot_tokens_made_by(*, user, tenant: Tenant, why: str) -> int:
    """The team's CI robot tokens `user` made, revoked as they leave the team (or are erased):
    a secret handed out by someone who left must not keep working for them. The owners are told
    which, so CI that used one gets a new token. Call inside the transaction of the leaving."""
    if tenant.robot_id is None:
        return 0
    made = ApiToken.objects.filter(user_id=tenant.robot_id, created_by=user)
    tokens = list(made.filter(revoked_at__isnull=True).order_by("pk"))
    _revoke_held(made, reason=f"{user.get_username()} {why}")
    if tokens:
        names = ", ".join(f"{t.name} ({t.prefix}…)" for t in tokens)
        notify(
            "api_token.revoked_with_maker",
            tenant,
            subject=f"{tenant.slug}: CI robot tokens revoked",
            text=f"{user.get_username()} {why}; the CI robot tokens they made were revoked: "
            f"{names}. Issue a new token for the CI that used one.",
            data={"tokens": [t.prefix for t in tokens]},
        )
    return len(tokens)


def revoke_robot_tokens_of_leavers() -> int:
    """CI robot tokens whose maker is no longer in the robot's team (they left before leaving
    revoked them, or some other way): revoked, the owners told, as a leaving now does.
    Level-triggered, for the daily task: one query finds them whatever the number of teams."""
    left = (
        ApiToken.objects.filter(
            user__robot_of__isnull=False, revoked_at__isnull=True, created_by__isnull=False
        )
        .exclude(created_by__memberships__tenant=F("user__robot_of"))
        .values_list("user__robot_of", "created_by")
        .distinct()
    )
    pairs = list(left)
    tenants = Tenant.objects.in_bulk({t for t, _ in pairs})
    makers = get_user_model().objects.in_bulk({m for _, m in pairs})
    revoked = 0
    for tenant_id, maker_id in pairs:
        with transaction.atomic():
            revoked += revoke_robot_tokens_made_by(
                user=makers[maker_id], tenant=tenants[tenant_id], why="is no longer in the team"
            )
    return revoked


def give_tokens_an_expiry(now: datetime | None = None) -> int:
    """Tokens made before every token had an end get the platform's longest from now, each
    with its audit event and a notice to the person it belongs to (a robot's: to whoever made
    it): CI keeps working until then. Level-triggered, for the daily task."""
    now = now or timezone.now()
    given = 0
    with transaction.atomic():
        tokens = ApiToken.objects.select_for_update(of=("self",)).filter(
            expires_at__isnull=True, revoked_at__isnull=True
        )
        for token in tokens.select_related("user", "created_by"):
            before = audit.snapshot(token, TOKEN_FIELDS)
            token.expires_at = longest_expiry(now)
            token.save(update_fields=["expires_at"])
            tenant = Tenant.objects.filter(robot_id=token.user_id).first()
            audit.record(
                actor=None,
                verb="api_token.expiry_set",
                obj=token,
                tenant=tenant,
                before=before,
                after=audit.snapshot(token, TOKEN_FIELDS),
            )
            person = token.created_by if tenant is not None else token.user
            notify(
                "api_token.expiry_set",
                tenant,
                subject=f"Your API token {token.name} now ends on {token.expires_at:%Y-%m-%d}",
                text=f"Every API token now has an end. {token.name} ({token.prefix}…) works "
                f"until {token.expires_at:%Y-%m-%d %H:%M %Z}; issue a new one before then.",
                data={"token": token.prefix, "expires_at": token.expires_at.isoformat()},
                person=person,
            )
            given += 1
    return given


def void_admin_tokens_of_former_admin(user) -> int:
    """An `admin` token is void once its user stops being a platform admin: revoked for good
    (by the system, audited), so making them an admin again later does not bring it back.
    Returns how many were revoked; none while the user is still an admin."""
    if user is None or is_platform_admin(user):
        return 0
    return _revoke_held(
        ApiToken.objects.filter(user=user, scopes__contains=[ApiToken.Scope.ADMIN]),
        reason=f"{user.get_username()} is no longer a platform admin",
    )


def _revoke_held(tokens, *, reason: str) -> int:
    """Revoke the live ones of `tokens` by the system, each audited with `reason` and dropped
    from the cache (now and again after commit, as `revoke_token` does). Returns how many."""
    revoked = 0
    with transaction.atomic():
        for token in tokens.select_for_update().filter(revoked_at__isnull=True).order_by("pk"):
            _revoke_locked(None, token, reason)
            revoked += 1
    return revoked


def _forget(key: str) -> None:
    """Drop a cached token; a cache that does not answer must not undo the revocation (with
    Redis down nothing is read from it either)."""
    try:
        cache.delete(key)
    except Exception:  # noqa: BLE001 - any cache failure: the row is revoked all the same
        log.warning("could not drop a revoked token from the cache", exc_info=True)


def _cache_key(token_hash: str) -> str:
    return f"api-token:{token_hash}"


def _cached_token(key: str, now: datetime) -> tuple[float, ApiToken] | None:
    """The token row (with its user) read at most API_TOKEN_CACHE_SECONDS ago, by `now`."""
    entry = cache.get(key)
    if entry is None:
        return None
    read_at, token = entry
    if not 0 <= now.timestamp() - read_at < settings.API_TOKEN_CACHE_SECONDS:
        return None
    return read_at, token


def authenticate_token(raw: str, *, now: datetime | None = None) -> ApiToken | None:
    """The usable token with this secret, or None; records its last use (at most once a
    minute, so a busy CI job does not write on every call).

    The token's row and its user's are kept in the shared cache for API_TOKEN_CACHE_SECONDS
    after they are read, under the sha256 of the secret (never the secret; the user's password
    hash is left out): a call then costs no query. `revoke_token` drops the entry (at once,
    and again when it commits); whatever else makes a token unusable (its user deactivated, a
    call that read the row just before a revocation committed and cached it after) takes effect
    within that bound. Expiry is checked on every call."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    now = now or timezone.now()
    token_hash = hash_token(raw)
    key = _cache_key(token_hash)
    cached = _cached_token(key, now) if settings.API_TOKEN_CACHE_SECONDS > 0 else None
    if cached is not None:
        read_at, token = cached
        if token.expires_at is not None and token.expires_at <= now:
            return None
    else:
        read_at = now.timestamp()
        found = (
            ApiToken.objects.usable(now)
            .select_related("user")
            .defer("user__password")
            .filter(token_hash=token_hash)
            .first()
        )
        if found is None:
            return None
        token = found
    if not token.user.is_active:
        return None
    used = token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1)
    if used:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    if settings.API_TOKEN_CACHE_SECONDS > 0 and (cached is None or used):
        # Re-stored with its first read's time: a busy token's entry never outlives the bound.
        cache.set(key, (read_at, token), settings.API_TOKEN_CACHE_SECONDS)
    return token


def revoke_tokens_of(user, *, reason: str) -> int:
    """Revoke every live token of `user` (by the system, audited, dropped from the cache as
    `revoke_token` does): their holder has left. Returns how many."""
    return _revoke_held(ApiToken.objects.filter(user=user), reason=reason)
