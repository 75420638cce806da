"""Errors of the pure broker state. The shells map each class to a wire code in one table."""

from __future__ import annotations


class BrokerError(Exception):
    """Base class for refusals by the broker's state."""


class NotInFlightError(BrokerError):
    """FIN/REQ/TOUCH of an id that is not in flight (nsqd: "ID not in flight")."""

    def __init__(self) -> None:
        super().__init__("ID not in flight")


class NotOwnerError(BrokerError):
    """FIN/REQ/TOUCH by a client that was not given the message."""

    def __init__(self) -> None:
        super().__init__("client does not own message")


class TopicNotFoundError(BrokerError):
    """The topic does not exist (HTTP 404 TOPIC_NOT_FOUND)."""


class ChannelNotFoundError(BrokerError):
    """The channel does not exist (HTTP 404 CHANNEL_NOT_FOUND)."""


class BadPartitionError(BrokerError):
    """A publish that names no partition to an ordered topic (youzan: E_BAD_PARTITION)."""


class ExitingError(BrokerError):
    """The broker is shutting down (nsqd: "exiting")."""

    def __init__(self) -> None:
        super().__init__("exiting")


class NotWritableError(BrokerError):
    """The partition refuses writes (disk past its high-water mark, or a write error)."""


class NotEnoughReplicasError(NotWritableError):
    """Fewer copies of the partition are in sync than the topic's ``min_isr`` asks."""


class ConsumerLimitError(BrokerError):
    """SUB past ``--max-channel-consumers``."""


class PartitionNotFoundError(TopicNotFoundError):
    """A partition number the topic does not have on this node (youzan: E_TOPIC_NOT_EXIST)."""


class OrderedOnlyError(BrokerError):
    """Plain SUB / SUB_ADVANCED on an ordered (``orderedmulti``) topic."""


class ExtendSupportNeededError(BrokerError):
    """SUB on an ext topic by a client that did not IDENTIFY ``extend_support``."""


class ExtendSupportForbiddenError(BrokerError):
    """SUB on a topic that is not ext by a client that IDENTIFYed ``extend_support``."""


class OrderedSampleRateError(BrokerError):
    """SUB_ORDERED by a client with a non-zero ``sample_rate``."""


class ConsumeStartUnsupportedError(BrokerError):
    """A consume start the broker cannot apply (``special:<anything but -1>``)."""


class TopicConflictError(BrokerError):
    """``/topic/create`` of an existing topic with other partitions or flags."""


class NotLeaderError(BrokerError):
    """This node holds the partition but does not lead it (youzan: E_FAILED_ON_NOT_LEADER;
    non-fatal on publish, fatal on SUB and FIN)."""


class StaleEpochError(BrokerError):
    """A placement or write from an older leader epoch than the one held."""


class ChannelNotRegisteredError(BrokerError):
    """SUB to a channel that does not exist on a topic with ``disable_channel_auto_create``."""


class OffsetNotKeptError(BrokerError):
    """A read from an offset the partition no longer (or not yet) keeps."""


class PartitionNotConsumedError(BrokerError):
    """A channel has no cursor in that partition on this node (youzan's ``/message/finish``
    of an id from a partition held elsewhere)."""
