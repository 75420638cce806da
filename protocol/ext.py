"""youzan's JSON header ext (PUB_EXT / MPUB_EXT): validation, trace id, compatibility.

A header is a JSON object of string keys (youzan ext version 4). Keys starting with ``##`` are
reserved: ``##trace_id`` (a decimal string) becomes the trace id, the second half of the
message id, and asks for the traced reply. What a header does to a topic:

* ext topic: the header bytes are stored with the message, verbatim, and sent to consumers
  that IDENTIFYed ``extend_support``;
* any other topic: a header with only reserved keys is dropped and the message stored plain (as
  youzan nsqd with ``allow_ext_compatible``); any other key is ``E_EXT_NOT_SUPPORT``.

Errors follow youzan's texts and its fatal/non-fatal split (all three are non-fatal).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

from .errors import ClientError, ErrorCode, YouzanText

TRACE_ID_KEY: Final = "##trace_id"
RESERVED_PREFIX: Final = "##"
ZAN_TEST_KEY: Final = "zan_test"

_UINT: Final = re.compile(r"[0-9]+\Z")
_UINT64_MAX: Final = (1 << 64) - 1
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_DECODER: Final = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class JsonHeader:
    """A validated header: its trace id (None when absent) and whether a non-ext topic may
    drop it (only reserved keys)."""

    trace_id: int | None
    ignorable: bool


def parse_json_header(header: bytes) -> JsonHeader:
    """Validate a PUB_EXT / MPUB_EXT header as youzan nsqd does.

    Raises:
        ClientError: non-fatal ``E_INVALID_JSON_HEADER`` (not JSON, or empty) or
            ``INVALID_TRACE_ID`` (``##trace_id`` not a string, or not a decimal u64).
    """
    text = header.decode("utf-8", "replace").lstrip(" \t\r\n")
    try:
        value, _ = _DECODER.raw_decode(text)  # Go's json.Decoder reads one value
    except (ValueError, RecursionError) as exc:  # too deep nesting: a decode error too
        raise ClientError(ErrorCode.INVALID_JSON_HEADER, YouzanText.INVALID_JSON_HEADER) from exc
    if not isinstance(value, dict):
        return JsonHeader(None, True)
    trace_id = None
    if TRACE_ID_KEY in value:
        raw = value[TRACE_ID_KEY]
        if not isinstance(raw, str):
            raise ClientError(ErrorCode.INVALID_TRACE_ID, YouzanText.TRACE_ID_NOT_STRING)
        if _UINT.match(raw) is None or int(raw) > _UINT64_MAX:
            raise ClientError(ErrorCode.INVALID_TRACE_ID, YouzanText.TRACE_ID_INVALID)
        trace_id = int(raw)
    return JsonHeader(trace_id, all(_reserved(k, v) for k, v in value.items()))


def _reserved(key: str, value: object) -> bool:
    """A key a non-ext topic may drop: ``##...``, or a ``zan_test`` flag that is not true
    (youzan removes those before its check)."""
    if key.startswith(RESERVED_PREFIX):
        return True
    return key == ZAN_TEST_KEY and not (
        value is True or (isinstance(value, str) and value in _GO_TRUE)
    )


def ext_not_supported(topic: str) -> ClientError:
    """``E_EXT_NOT_SUPPORT``: a header with custom keys sent to a topic that is not ext."""
    return ClientError(ErrorCode.EXT_NOT_SUPPORT, YouzanText.EXT_NOT_SUPPORTED.format(topic))
