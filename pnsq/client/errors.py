"""The client's errors: what nsqd said (:class:`NsqError`) and what happened to the connection."""

from __future__ import annotations

from protocol.errors import NON_FATAL_CODES


class NsqError(Exception):
    """nsqd answered a command with an error frame.

    Attributes:
        text: the frame's whole text, ``"<CODE> <description>"``, exactly as nsqd sent it.
        code: the leading code, e.g. ``"E_BAD_TOPIC"``.
        description: the text after the code (may be empty).
    """

    def __init__(self, text: str) -> None:
        super().__init__(printable(text))  # str(): raw bytes escaped; ``text`` as nsqd sent it
        self.text = text
        self.code, _, self.description = text.partition(" ")

    @property
    def fatal(self) -> bool:
        """Whether nsqd closes the connection after this error."""
        return self.code not in NON_FATAL_CODES


class ConnectionClosedError(Exception):
    """The connection is closed (by us, by nsqd, or broken); ``__cause__`` says why if known."""


class ReplyTimeoutError(ConnectionClosedError):
    """A command's reply did not come in time, so its connection was closed: the command may
    or may not have taken effect (a retried publish may be stored twice)."""


class UnexpectedResponseError(Exception):
    """nsqd sent a frame this client cannot make sense of (a reply of the wrong shape)."""


class NsqHTTPError(Exception):
    """nsqd's HTTP API answered with an error status.

    Attributes:
        status: the HTTP status, e.g. 404.
        message: nsqd's ``{"message": ...}`` text (e.g. ``TOPIC_NOT_FOUND``), or the raw body.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class PartitionsUnknownError(LookupError):
    """A keyed publish (or a partitioned subscribe) needs the topic's partitions, and they are
    not known: no HTTP address was given, or the topic does not exist."""


def printable(text: str) -> str:
    """An error frame's text for a message or a log line: the raw bytes it may carry (FIN's
    binary message id) as ``\\xNN`` escapes, so it is valid UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
