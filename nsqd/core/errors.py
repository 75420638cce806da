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
    """A partition number the topic does not have."""


class ExitingError(BrokerError):
    """The broker is shutting down (nsqd: "exiting")."""

    def __init__(self) -> None:
        super().__init__("exiting")


class NotWritableError(BrokerError):
    """The partition refuses writes (disk past its high-water mark, or a write error)."""


class ConsumerLimitError(BrokerError):
    """SUB past ``--max-channel-consumers``."""
