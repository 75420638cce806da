"""Which consumer of a channel gets a message of an ext topic: youzan's dispatch tags and filters.

Pure decisions over a message's JSON header (youzan ext version 4), made when a consumer takes
the message from the channel:

* dispatch tag: a header with ``##client_dispatch_tag: X`` goes only to consumers that
  IDENTIFYed ``desired_tag: X`` while one such consumer is subscribed to the channel, else to
  the untagged consumers. A tagged consumer gets only messages of its tag (youzan's tagged
  client reads only its tag's queue);
* ``ext_filter`` (IDENTIFY): a message the consumer's filter does not match is confirmed by
  the server without delivery (types 1 exact, 2 regexp, 3 glob, 4 several exact ones joined by
  ``any``/``all``; ``inverse`` flips the result);
* channel skipping (youzan ``/channel/skip``) and ``/channel/skipZanTest`` (a header whose
  ``zan_test`` is true) confirm messages without delivery as well.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

DISPATCH_TAG_KEY: Final = "##client_dispatch_tag"
ZAN_TEST_KEY: Final = "zan_test"
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_EXACT, _REGEXP, _GLOB, _MULTI = 1, 2, 3, 4


class Verdict(Enum):
    """What a consumer taking a message does with it."""

    DELIVER = "deliver"
    DROP = "drop"  # confirmed by the server, never delivered
    OTHERS = "others"  # left for another consumer of the channel


class ExtFilterError(ValueError):
    """An ``ext_filter`` youzan would not build (it then consumes unfiltered)."""


@dataclass(frozen=True, slots=True)
class ExtFilter:
    """IDENTIFY's ``ext_filter``, validated."""

    type: int
    key: str  # the header key; for type 4 the relation ``any`` / ``all``
    data: str = ""
    inverse: bool = False
    data_list: tuple[tuple[str, str], ...] = ()

    def matches(self, header: Mapping[str, object]) -> bool:
        """Whether a message with ``header`` passes (``inverse`` applied)."""
        return self._match(header) != self.inverse

    def _match(self, header: Mapping[str, object]) -> bool:
        if self.type == _MULTI:
            results = (_text(header.get(k)) == d for k, d in self.data_list)
            return any(results) if self.key == "any" else self.key == "all" and all(results)
        value = _text(header.get(self.key))
        if self.type == _EXACT:
            return value == self.data
        if value is None:
            return False
        if self.type == _REGEXP:
            return re.search(self.data, value) is not None
        return fnmatch.fnmatchcase(value, self.data)


def parse_ext_filter(raw: object) -> ExtFilter | None:
    """IDENTIFY's ``ext_filter`` object (None when absent or ``type`` 0).

    Raises:
        ExtFilterError: the shape youzan refuses (no key, no data, bad pattern, bad type).
    """
    if not isinstance(raw, dict) or not raw.get("type"):
        return None
    kind, key = raw.get("type"), raw.get("filter_ext_key") or ""
    data = raw.get("filter_data") or ""
    if kind not in (_EXACT, _REGEXP, _GLOB, _MULTI) or not isinstance(key, str) or not key:
        raise ExtFilterError(f"invalid ext filter {raw!r}")
    items: list[tuple[str, str]] = []
    if kind == _MULTI:
        for item in raw.get("filter_data_list") or ():
            if not isinstance(item, dict):
                raise ExtFilterError(f"invalid ext filter item {item!r}")
            items.append((str(item.get("filter_ext_key", "")), str(item.get("filter_data", ""))))
        if not items:
            raise ExtFilterError("ext filter of type 4 without filter_data_list")
    elif not isinstance(data, str) or not data:
        raise ExtFilterError(f"invalid ext filter {raw!r}")
    if kind == _REGEXP:
        try:
            re.compile(data)
        except re.error as exc:
            raise ExtFilterError(str(exc)) from exc
    return ExtFilter(kind, key, data, bool(raw.get("inverse")), tuple(items))


def header_of(ext: bytes) -> dict[str, object]:
    """A stored JSON header as a dict ({} for none or one that is not an object)."""
    if not ext:
        return {}
    try:
        value = json.loads(ext)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def dispatch_tag(header: Mapping[str, object]) -> str:
    """The message's dispatch tag ("" for none)."""
    tag = header.get(DISPATCH_TAG_KEY)
    return tag if isinstance(tag, str) else ""


def is_zan_test(header: Mapping[str, object]) -> bool:
    """youzan's internal test flag: ``zan_test`` true (a bool, or Go's spellings of true)."""
    value = header.get(ZAN_TEST_KEY)
    return value is True or (isinstance(value, str) and value in _GO_TRUE)


def decide(
    header: Mapping[str, object],
    *,
    consumer_tag: str,
    present_tags: Collection[str],
    ext_filter: ExtFilter | None = None,
    skip_zan_test: bool = False,
) -> Verdict:
    """What a consumer with ``consumer_tag`` ("" untagged) and ``ext_filter`` does with a
    message whose header is ``header``; ``present_tags``: the tags of the consumers subscribed
    to the channel now."""
    if skip_zan_test and is_zan_test(header):
        return Verdict.DROP
    tag = dispatch_tag(header)
    owner = tag if tag in present_tags else ""
    if owner != consumer_tag:
        return Verdict.OTHERS
    if ext_filter is not None and not ext_filter.matches(header):
        return Verdict.DROP
    return Verdict.DELIVER


def _text(value: object) -> str | None:
    """A header value as youzan compares it: strings as they are, other JSON as JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))
