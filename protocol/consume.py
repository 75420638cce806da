"""Where a channel starts consuming: youzan's ``ConsumeOffset``.

``SUB_ADVANCED <topic> <channel> <partition> <start>`` and nsqd's ``POST /channel/setoffset``
body share one syntax, ``<type>:<value>``:

* ``timestamp:<unix seconds>``: the first message published at or after that time;
* ``msgcount:<n>``: the n-th message of the partition (pnsq: ``start_offset + n``);
* ``virtual_queue:<offset>``: a position in the partition (youzan: a byte offset; pnsq: a log
  offset, the same number the detail block and the traced reply carry);
* ``special:-1``: the end (only new messages).

Parsing follows youzan's ``ConsumeOffset.FromBytes`` and its error texts; what a kind means for
a given partition log is the broker's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

from .errors import YouzanText
from .gostr import go_quote

_PARSE_INT: Final = re.compile(rb"[+-]?[0-9]+\Z")
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


class StartKind(Enum):
    """The four consume-start types youzan knows."""

    TIMESTAMP = "timestamp"
    MSGCOUNT = "msgcount"
    VIRTUAL_QUEUE = "virtual_queue"
    SPECIAL = "special"


@dataclass(frozen=True, slots=True)
class ConsumeStart:
    """A parsed ``<type>:<value>``."""

    kind: StartKind
    value: int

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.value}"


class ConsumeStartError(ValueError):
    """Not a consume start; ``str()`` is youzan's text (sent after ``E_INVALID`` or as HTTP 400)."""


def parse_consume_start(raw: bytes | str) -> ConsumeStart:
    """Parse ``<type>:<value>`` as youzan's ``ConsumeOffset.FromBytes`` does.

    Raises:
        ConsumeStartError: ``invalid consume offset:<raw>`` for a bad shape or type, or Go's
            ``strconv.ParseInt`` text for a bad number.
    """
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)
    parts = data.split(b":")
    kinds = {k.value.encode(): k for k in StartKind}
    if len(parts) != 2 or parts[0] not in kinds:
        text = data.decode("utf-8", "surrogateescape")
        raise ConsumeStartError(YouzanText.INVALID_CONSUME_OFFSET.format(text))
    number = parts[1]
    if _PARSE_INT.match(number) is None:
        raise ConsumeStartError(f"strconv.ParseInt: parsing {go_quote(number)}: invalid syntax")
    value = int(number)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ConsumeStartError(f"strconv.ParseInt: parsing {go_quote(number)}: value out of range")
    return ConsumeStart(kinds[parts[0]], value)
