"""Server-side confirmation of a channel cursor's messages (youzan): finishing a message no
consumer FINed, wherever it is (in flight, waiting to be delivered again, or not read yet).

youzan's ``/message/finish``, ``/channel/emptydelayed``, ``/channel/requeuedelayed``, tag
filters and skipped channels confirm or release messages on the server's behalf. These are
plain functions over a :class:`~.cursor.PartitionCursor`: they need only its public state and
:meth:`~.cursor.PartitionCursor.confirm_offset`, and keep the cursor's own module to the
consumer's path (take, FIN, REQ, TOUCH, timeouts). Pure, as the cursor.
"""

from __future__ import annotations

from .cursor import PartitionCursor
from .inflight import Message

__all__ = [
    "confirm_deferred",
    "confirm_unsent",
    "confirm_waiting",
    "finish_held",
    "is_confirmed",
    "release_deferred",
]


def confirm_unsent(cursor: PartitionCursor, message: Message) -> None:
    """A taken message the server confirms without delivering it (youzan's filters and
    skipped channels): FINed as if delivered and finished at once."""
    cursor.confirm_offset(message.offset)


def is_confirmed(cursor: PartitionCursor, offset: int) -> bool:
    """Whether ``offset`` is finished (below ``confirmed``, or FINed out of order)."""
    return offset < cursor.confirmed or offset in cursor.acked


def finish_held(cursor: PartitionCursor, offset: int) -> list[object]:
    """FIN of the message in flight at ``offset`` whoever holds it (youzan's
    ``/message/finish``): its holder (one entry), or ``[]`` if nothing is in flight there."""
    message = cursor.in_flight.get(offset)
    if message is None:
        return []
    owner = message.owner
    cursor.finish(offset, owner)
    return [owner]


def confirm_waiting(cursor: PartitionCursor, offset: int) -> bool:
    """Confirm unsent the message at ``offset`` if it waits to be delivered again
    (requeued, deferred, or timed out behind the log): taken out of its queue; False if it
    waits nowhere."""
    waiting = [m for m in (*cursor.ready, *cursor.deferred) if m.offset == offset]
    for message in waiting:
        if message in cursor.ready:
            cursor.ready.remove(message)
        else:
            cursor.deferred.remove(message)
    behind = [entry for entry in cursor.behind if entry[1].offset == offset]
    for entry in behind:
        cursor.behind.remove(entry)
    if not waiting and not behind:
        return False
    cursor.confirm_offset(offset)
    return True


def confirm_deferred(cursor: PartitionCursor) -> int:
    """Confirm unsent every deferred message (youzan's ``/channel/emptydelayed``); how many."""
    dropped = list(cursor.deferred)
    cursor.deferred.clear()
    for message in dropped:
        confirm_unsent(cursor, message)
    return len(dropped)


def release_deferred(cursor: PartitionCursor) -> int:
    """Every deferred message due now, in due order, after the requeued ones (youzan's
    ``/channel/requeuedelayed``); how many."""
    released = len(cursor.deferred)
    cursor.ready.extend(cursor.deferred)
    cursor.deferred.clear()
    return released
