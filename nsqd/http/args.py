"""Query arguments as nsqd's handlers read them, shared by every endpoint group.

Each helper raises :class:`~nsqd.http.base.HTTPError` with nsqd's reply for a missing or
malformed argument; which name a reply uses (``INVALID_TOPIC`` or ``INVALID_ARG_TOPIC``) is
nsqd 1.3.0's per endpoint family, so the helpers keep both spellings.
"""

from __future__ import annotations

import re
from typing import Final

from protocol.names import is_valid_name

from .base import HTTPError, Request

__all__ = ["topic_arg", "topic_channel_args", "uint_arg"]

_UINT: Final = re.compile(r"[0-9]{1,19}")


def topic_arg(request: Request, *, validate: bool = True) -> str:
    """``topic`` as nsqd's topic endpoints read it."""
    name = request.arg("topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if validate and not is_valid_name(name):
        raise HTTPError(400, "INVALID_TOPIC")
    return name


def topic_channel_args(request: Request) -> tuple[str, str]:
    """``topic`` and ``channel`` as nsqd's ``http_api.GetTopicChannelArgs`` reads them."""
    topic = request.arg("topic")
    if topic is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    channel = request.arg("channel")
    if channel is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def uint_arg(request: Request, name: str, default: int | None = None) -> int:
    """Query parameter ``name`` as an unsigned decimal (pnsq's endpoints): absent ->
    ``default``, or ``400 MISSING_ARG_<NAME>`` without one; anything but 1-19 digits ->
    ``400 INVALID_<NAME>``."""
    raw = request.arg(name)
    if raw is None:
        if default is None:
            raise HTTPError(400, f"MISSING_ARG_{name.upper()}")
        return default
    if not _UINT.fullmatch(raw):
        raise HTTPError(400, f"INVALID_{name.upper()}")
    return int(raw)
