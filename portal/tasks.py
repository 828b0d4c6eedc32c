"""The portal's own periodic work, which spans apps."""

from core.tasks import portal_task
from portal import retention


@portal_task(name="portal.tasks.purge_expired_records")
def purge_expired_records() -> dict[str, int]:
    return retention.purge_expired()
