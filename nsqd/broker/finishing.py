"""Finishing one message of a channel by its offset from outside its consumers (youzan's
``/message/finish``): wherever the message is (in flight, requeued, deferred, held for a tag's
consumers, or not read yet), it is confirmed, and a holder gets its RDY room back."""

from __future__ import annotations

from ..core.confirming import confirm_waiting, finish_held, is_confirmed
from ..core.errors import OffsetNotKeptError
from .channel import Channel
from .reading import read_records


async def finish_anywhere(channel: Channel, number: int, offset: int) -> bool:
    """Confirm the message at ``offset`` of partition ``number`` in ``channel``; False if it
    was confirmed already.

    Raises:
        PartitionNotConsumedError: the channel has no cursor in ``number`` here.
        NotLeaderError: this node holds the partition but does not lead it.
        OffsetNotKeptError: the log has no message at ``offset`` (never written, or deleted).
        TopicNotFoundError: the topic was deleted meanwhile.
        StorageError: the disk failed.
    """
    partition, cursor = channel.led_cursor(number)
    if is_confirmed(cursor, offset):
        return False
    owners = finish_held(cursor, offset)
    if owners:
        channel.release(owners)
    elif channel.dispatch.drop_held(number, offset):  # taken, waiting for a tag's consumer
        cursor.confirm_offset(offset)
    elif not confirm_waiting(cursor, offset):
        records = await read_records(partition, offset, 1)
        if not records or records[0].offset != offset:
            raise OffsetNotKeptError(f"no message at offset {offset}")
        cursor.confirm_offset(offset)
    partition.dirty = True
    return True
