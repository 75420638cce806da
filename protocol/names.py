"""Topic and channel name rules (nsqd ``internal/protocol/names.go``)."""

from __future__ import annotations

import re
from typing import Final

EPHEMERAL_SUFFIX: Final = "#ephemeral"
MAX_NAME_LENGTH: Final = 64

_NAME_RE: Final = re.compile(r"^[.a-zA-Z0-9_-]+(#ephemeral)?$")


def is_valid_name(name: str) -> bool:
    """True if ``name`` is a legal topic or channel name: 1..64 chars incl. ``#ephemeral``."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME_RE.fullmatch(name) is not None


is_valid_topic_name = is_valid_name
is_valid_channel_name = is_valid_name


def is_ephemeral(name: str) -> bool:
    """True for ``#ephemeral`` topics and channels, which live in memory only."""
    return name.endswith(EPHEMERAL_SUFFIX)
