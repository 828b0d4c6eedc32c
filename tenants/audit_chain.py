"""The audit log's hash chain: tamper-evident, yet a person's data can be erased from it and its
oldest rows purged.

A row is sealed after it is committed (beat's `seal_audit_log`, and before every erasure and
purge): it takes the next place `chain_seq` and `chain_digest = sha256(previous digest, its fixed
fields, content_digest)`. Its personal content (actor_repr, object_repr, before, after) enters the
chain only as `content_digest = sha256(salt, content)`, so:

- erasure rewrites that content and drops the salt (`erased_by` names the `person.erased` event):
  the chain still verifies, and the old content can no longer be confirmed from its digest;
- the purge deletes a prefix of the chain, never its head, and records `audit.purged` with the
  last place and digest it cut, where verification starts again.

Sealing in the order rows are sealed (not their ids) means a transaction that commits late is
simply sealed later; one advisory lock keeps sealer, erasure and purge one at a time.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from tenants.models import AuditEvent

ERASED_VERB = "person.erased"
PURGED_VERB = "audit.purged"
_LOCK_KEY = 0x6175646974  # "audit": the advisory lock of everything that writes the chain
_FIXED = (
    "id",
    "created_at",
    "actor_id",
    "tenant_id",
    "verb",
    "object_type",
    "object_id",
    "request_id",
)
CONTENT_FIELDS = ("actor_repr", "object_repr", "before", "after")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def content_digest(row: dict[str, Any], salt: str) -> str:
    return hashlib.sha256(salt.encode() + _canonical([row[f] for f in CONTENT_FIELDS])).hexdigest()


def chain_digest(previous: str, seq: int, row: dict[str, Any], content: str) -> str:
    fixed = [row[f].isoformat() if f == "created_at" else row[f] for f in _FIXED]
    return hashlib.sha256(previous.encode() + _canonical([seq, fixed, content])).hexdigest()


def lock_chain() -> None:
    """Held to the end of the caller's transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def allow(write: str) -> None:
    """Let the trigger pass erasure or purge writes, for this transaction only."""
    assert write in ("erasure", "purge")
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'on', true)", [f"gpu_portal.audit_{write}"])


def head() -> tuple[int, str]:
    last = (
        AuditEvent.objects.filter(chain_seq__isnull=False)
        .order_by("-chain_seq")
        .values_list("chain_seq", "chain_digest")
        .first()
    )
    return (last[0] or 0, last[1]) if last else (0, "")


def seal_locked(batch: int = 1000) -> int:
    """Seal every committed row not yet in the chain; the caller holds `lock_chain()`."""
    sealed = 0
    seq, previous = head()
    while True:
        rows = list(
            AuditEvent.objects.filter(chain_seq__isnull=True)
            .order_by("id")
            .values(*_FIXED, *CONTENT_FIELDS)[:batch]
        )
        if not rows:
            return sealed
        updates = []
        for row in rows:
            seq += 1
            salt = secrets.token_hex(16)
            content = content_digest(row, salt)
            previous = chain_digest(previous, seq, row, content)
            updates.append(
                AuditEvent(
                    pk=row["id"],
                    chain_seq=seq,
                    chain_digest=previous,
                    content_digest=content,
                    content_salt=salt,
                )
            )
        AuditEvent.objects.bulk_update(
            updates, ["chain_seq", "chain_digest", "content_digest", "content_salt"]
        )
        sealed += len(updates)


def seal_pending() -> int:
    with transaction.atomic():
        lock_chain()
        return seal_locked()


@dataclass
class Verification:
    checked: int = 0
    unsealed: int = 0
    first_seq: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _start(first_seq: int, result: Verification) -> str | None:
    """The digest before the chain's first remaining row: none at 1, else a purge's checkpoint."""
    if first_seq == 1:
        return ""
    checkpoint = (
        AuditEvent.objects.filter(verb=PURGED_VERB, after__through_seq=first_seq - 1)
        .order_by("-id")
        .values_list("after", flat=True)
        .first()
    )
    if checkpoint is None:
        result.problems.append(
            f"the chain starts at {first_seq} but no {PURGED_VERB} event cut it at {first_seq - 1}"
        )
        return None
    return str(checkpoint.get("digest", ""))


def verify() -> Verification:
    """Walk the chain from its first remaining row: every place present, every digest right,
    every content matching its salted digest or erased by a recorded erasure made after it."""
    result = Verification(unsealed=AuditEvent.objects.filter(chain_seq__isnull=True).count())
    erasures = set(AuditEvent.objects.filter(verb=ERASED_VERB).values_list("id", flat=True))
    rows = (
        AuditEvent.objects.filter(chain_seq__isnull=False)
        .order_by("chain_seq")
        .values(
            *_FIXED,
            *CONTENT_FIELDS,
            "chain_seq",
            "chain_digest",
            "content_digest",
            "content_salt",
            "erased_by",
        )
        .iterator(chunk_size=2000)
    )
    previous: str | None = None
    expected_seq = 0
    for row in rows:
        seq = row["chain_seq"]
        if result.first_seq is None:
            result.first_seq = expected_seq = seq
            previous = _start(seq, result)
            if previous is None:
                return result
        if seq != expected_seq:
            result.problems.append(f"places {expected_seq}..{seq - 1} are missing")
        expected_seq = seq + 1
        if row["content_salt"]:
            if content_digest(row, row["content_salt"]) != row["content_digest"]:
                result.problems.append(f"event {row['id']} (place {seq}): content changed")
        elif row["erased_by"] not in erasures:
            result.problems.append(f"event {row['id']} (place {seq}): erased without an erasure")
        elif row["erased_by"] < row["id"]:
            # an erasure clears what was written before it; a row written after it and "erased"
            # by it is a row whose content someone changed and then dropped the salt of
            result.problems.append(
                f"event {row['id']} (place {seq}): erased by event {row['erased_by']}, which "
                "came before it"
            )
        digest = chain_digest(previous or "", seq, row, row["content_digest"])
        if digest != row["chain_digest"]:
            result.problems.append(f"event {row['id']} (place {seq}): digest does not match")
        previous = row["chain_digest"]  # go on from what is stored: one problem, one line
        result.checked += 1
    return result
