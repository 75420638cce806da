"""youzan nsqd's own HTTP endpoints, with its names and replies (``nsqdserver/http.go``):

* ``POST /pub_ext?topic=&partition=&ext=<JSON>``: one message with a JSON header; headers
  ``X-Nsqext-<Key>: v`` are merged into it under the lower-cased key; with ``##trace_id`` the
  traced JSON reply ``{"status","id","trace_id","queue_offset","rawsize"}``, else ``OK``;
* ``POST /pubtrace?topic=&partition=&trace_id=``: one message with a trace id, traced reply;
* ``GET /message/get?topic=&partition=&search_mode=count|id|virtual_offset&search_pos=
  [&needext=true]``: one stored message; ``POST /message/finish?topic=&partition=&channel=
  &msgid=``: finish a message of a channel by its internal id, wherever it is;
* ``POST /channel/{skip,unskip,skipZanTest,unskipZanTest,setorder,emptydelayed,
  requeuedelayed}?topic=&channel=[&order=]``; in a pnsq cluster the skip and setorder calls
  are carried to the topic's other partition leaders, as the admin calls are.

pnsq's offsets are log offsets (``docs/compatibility.md``), so ``virtual_offset`` and the
replies' ``offset``/``queue_offset`` are log offsets; ``count`` is the n-th message still kept.
Domain errors are answered by :data:`~nsqd.http.errors.YOUZAN_PUBLISH_ERRORS` (the publishes)
and :data:`~nsqd.http.errors.YOUZAN_ERRORS` (the rest).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Final

from protocol.ext import TRACE_ID_KEY, parse_json_header
from protocol.message import PARTITION_SHIFT

from ..broker import Channel, NewRecord, Partition, Record, Topic, ext_header, read_records
from ..broker.admin import get_channel, replicated
from ..broker.finishing import finish_anywhere
from .args import topic_arg
from .base import HTTPError, Reply, Request, Route, go_json, routes_with
from .context import HTTPContext
from .errors import YOUZAN_ERRORS, YOUZAN_PUBLISH_ERRORS
from .topic_admin import spread

log = logging.getLogger("nsqd.http")

EXT_HEADER_PREFIX: Final = b"x-nsqext-"  # youzan's X-Nsqext-<Key> (HTTP header names fold)
_UINT: Final = re.compile(r"[0-9]+")
_INT: Final = re.compile(r"[+-]?[0-9]+")
_UINT64_MAX: Final = (1 << 64) - 1
_SEQ_MASK: Final = (1 << PARTITION_SHIFT) - 1


class YouzanAPI:
    """The handlers; :meth:`routes` gives the app's route table entries."""

    def __init__(self, context: HTTPContext) -> None:
        self.context = context
        self.broker = context.broker

    def routes(self) -> dict[str, Route]:
        """``path -> Route``."""
        publishing = {
            "/pub_ext": {"POST": self.pub_ext},
            "/pubtrace": {"POST": self.pubtrace},
        }
        return routes_with(YOUZAN_PUBLISH_ERRORS, publishing) | routes_with(
            YOUZAN_ERRORS,
            {
                "/message/get": {"GET": self.message_get},
                "/message/finish": {"POST": self.message_finish},
                "/channel/skip": {"POST": self.channel_skip},
                "/channel/unskip": {"POST": self.channel_skip},
                "/channel/skipZanTest": {"POST": self.channel_skip_zan_test},
                "/channel/unskipZanTest": {"POST": self.channel_skip_zan_test},
                "/channel/setorder": {"POST": self.channel_setorder},
                "/channel/emptydelayed": {"POST": self.channel_emptydelayed},
                "/channel/requeuedelayed": {"POST": self.channel_requeuedelayed},
            },
        )

    # ------------------------------------------------------------------ publishing

    async def _body(self, request: Request) -> bytes:
        limit = self.context.settings.max_msg_size
        length = request.content_length
        if length is not None and length > limit:
            raise HTTPError(413, "MSG_TOO_BIG")
        body = await request.body(limit)
        if len(body) > limit:
            raise HTTPError(413, "MSG_TOO_BIG")
        if not body:
            raise HTTPError(406, "MSG_EMPTY")
        return body

    def _target(self, request: Request) -> tuple[Topic, int | None]:
        name = topic_arg(request)
        topic = self.broker.find_topic(name)
        if topic is None or topic.deleted:
            raise HTTPError(404, "E_TOPIC_NOT_EXIST")
        return topic, _partition_arg(request)

    async def pub_ext(self, request: Request) -> Reply:
        """youzan's ``/pub_ext`` (see the module doc)."""
        body = await self._body(request)
        topic, partition = self._target(request)
        try:
            header = json.loads(request.arg("ext") or "")
        except (ValueError, RecursionError):  # too deep nesting: not a header either
            header = None
        if not isinstance(header, dict):
            raise HTTPError(400, "E_INVALID_JSON_HEADER")
        for name, value in request.headers.items():
            if name.lower().startswith(EXT_HEADER_PREFIX):
                key = name[len(EXT_HEADER_PREFIX) :].decode("latin-1").lower()
                header[key] = value.decode("latin-1")
        trace_text = None
        if TRACE_ID_KEY in header:
            trace_text = header[TRACE_ID_KEY]
            if not isinstance(trace_text, str):
                raise HTTPError(400, "INVALID_TRACE_ID")
            _trace_id(trace_text)
        raw = go_json(dict(sorted(header.items())))  # Go marshals a map with sorted keys
        if not topic.ext:
            if not parse_json_header(raw).ignorable:
                raise HTTPError(400, "E_EXT_NOT_SUPPORT")
            raw = b""
        trace = _trace_id(trace_text) if trace_text is not None else 0
        record = await self._publish(topic, partition, NewRecord(0, body, trace_id=trace, ext=raw))
        if trace_text is None:
            return b"OK"
        return _traced(record, trace_text)

    async def pubtrace(self, request: Request) -> Reply:
        """youzan's ``/pubtrace?trace_id=``: the traced JSON reply."""
        body = await self._body(request)
        topic, partition = self._target(request)
        text = request.arg("trace_id") or ""
        record = await self._publish(topic, partition, NewRecord(0, body, trace_id=_trace_id(text)))
        return _traced(record, text)

    async def _publish(self, topic: Topic, partition: int | None, entry: NewRecord) -> Record:
        broker = self.broker
        stamped = NewRecord(
            broker.clock.now_ns(), entry.body, trace_id=entry.trace_id, ext=entry.ext
        )
        records = await self.context.publishing.publish(topic.name, [stamped], partition)
        return records[0]

    # ------------------------------------------------------------------ messages

    async def message_get(self, request: Request) -> Reply:
        """One stored message by message count, internal id or log offset."""
        await self.context.auth.require(request, request.arg("topic") or "", None)
        topic = self.broker.find_topic(request.arg("topic") or "")
        mode = request.arg("search_mode") or ""
        raw_pos = request.arg("search_pos") or ""
        if not _INT.fullmatch(raw_pos):
            raise HTTPError(400, f'strconv.ParseInt: parsing "{raw_pos}": invalid syntax')
        position = int(raw_pos)
        if mode == "id":
            number = (position >> PARTITION_SHIFT) & 0xFFFF
            if number >= 1024:
                raise HTTPError(400, "invalid message id")
        else:
            raw = request.arg("partition") or ""
            if not _INT.fullmatch(raw):
                raise HTTPError(400, f'strconv.Atoi: parsing "{raw}": invalid syntax')
            number = int(raw)
        if topic is None or topic.deleted or not topic.holds(number):
            raise HTTPError(400, "E_TOPIC_NOT_EXIST")
        partition = topic.partition(number)
        if mode == "count":
            offset = partition.log.start_offset + position
        elif mode == "id":
            offset = (position & _SEQ_MASK) - 1
        elif mode == "virtual_offset":
            offset = position
        else:
            raise HTTPError(400, "search mode should be one of id/count/virtual_offset")
        record = await _read_one(partition, offset)
        return {
            "id": record.internal_id,
            "trace_id": record.trace_id,
            "body": record.body.decode("utf-8", "replace"),
            "timestamp": record.timestamp_ns,
            "attempts": _attempts(topic, number, record.offset),
            "offset": record.offset,
            "queue_cnt_index": record.offset + 1,
            "ext": ext_header(record.ext).decode("utf-8", "replace")
            if request.arg("needext") == "true"
            else "",
        }

    async def message_finish(self, request: Request) -> Reply:
        """Finish message ``msgid`` (internal id) of a channel, in flight or not yet."""
        await self.context.auth.require(
            request, request.arg("topic") or "", request.arg("channel") or ""
        )
        channel = self._channel(request)
        raw = request.arg("msgid") or ""
        if not _INT.fullmatch(raw):
            raise HTTPError(400, "INVALID_REQUEST")
        internal = int(raw)
        number, offset = (internal >> PARTITION_SHIFT) & 0x3FF, (internal & _SEQ_MASK) - 1
        finished = await finish_anywhere(channel, number, offset)
        if finished:
            log.info(
                "TOPIC(%s): message %d of channel %s finished by api", *_names(channel), internal
            )
        return None

    # ------------------------------------------------------------------ channels

    def _channel(self, request: Request) -> Channel:
        name = topic_arg(request)
        channel_name = request.arg("channel") or ""
        return get_channel(self.broker, name, channel_name)

    async def channel_skip(self, request: Request) -> Reply:
        """``/channel/skip``: confirm every message unsent from now on; ``/channel/unskip``:
        deliver again. Both move the channel to the end first, as youzan does; the flag is
        saved before the reply."""
        channel = self._channel(request)
        channel.set_skipped(not request.path.endswith("/unskip"))
        await self._save(channel)
        await spread(self.context, request, channel.topic.name)
        return None

    async def channel_skip_zan_test(self, request: Request) -> Reply:
        """``/channel/skipZanTest``: messages whose header has ``zan_test`` true are confirmed
        unsent (ext topics only: else ``400 INVALID_REQUEST``); saved before the reply."""
        channel = self._channel(request)
        if not channel.topic.ext:
            raise HTTPError(400, "INVALID_REQUEST")
        channel.set_skip_zan_test(not request.path.endswith("/unskipZanTest"))
        await self._save(channel)
        await spread(self.context, request, channel.topic.name)
        return None

    async def channel_setorder(self, request: Request) -> Reply:
        """``/channel/setorder?order=true|false`` (youzan issue #92's way out of ordered)."""
        channel = self._channel(request)
        order = request.arg("order")
        if order not in ("true", "false"):
            raise HTTPError(400, "INVALID_OPTION")
        channel.ordered = order == "true"
        channel.notify()
        await self._save(channel)
        await spread(self.context, request, channel.topic.name)
        return None

    async def channel_emptydelayed(self, request: Request) -> Reply:
        """Confirm the channel's deferred (delayed) messages unsent."""
        self._channel(request).confirm_deferred()
        return None

    async def channel_requeuedelayed(self, request: Request) -> Reply:
        """Deliver the channel's deferred (delayed) messages now."""
        self._channel(request).release_deferred()
        return None

    async def _save(self, channel: Channel) -> None:
        """Save ``pnsq.dat``, then wait (bounded) for the in-sync replicas to hold the change."""
        self.broker.syncs.request(metadata=True)
        await self.broker.wait_durable()
        await replicated(self.broker, self.broker.get_topic(channel.topic.name))


def _attempts(topic: Topic, number: int, offset: int) -> int:
    """Deliveries of the message at ``offset`` of partition ``number`` so far: the most any
    channel counts while it is in flight or waiting to go again (0 before the first, and
    once finished: attempts are a channel's, and a finished message is no longer held)."""
    counts = (
        cursor.attempts_of(offset)
        for channel in topic.channels.values()
        if (cursor := channel.cursors.get(number)) is not None
    )
    return max(counts, default=0)


def _names(channel: Channel) -> tuple[str, str]:
    return channel.topic.name, channel.name


def _trace_id(text: str) -> int:
    if not _UINT.fullmatch(text) or int(text) > _UINT64_MAX:
        raise HTTPError(400, "INVALID_TRACE_ID")
    return int(text)


def _traced(record: Record, trace_text: str) -> Reply:
    return {
        "status": "OK",
        "id": record.internal_id,
        "trace_id": trace_text,
        "queue_offset": record.offset,
        "rawsize": len(record.body) + len(ext_header(record.ext)) + 4,  # as the TCP traced reply
    }


async def _read_one(partition: Partition, offset: int) -> Record:
    records = await read_records(partition, offset, 1)
    if not records or records[0].offset != offset:
        raise HTTPError(404, f"no message at offset {offset}")
    return records[0]


def _partition_arg(request: Request) -> int | None:
    raw = request.arg("partition")
    if raw is None or raw == "" or raw == "-1":
        return None
    if not _UINT.fullmatch(raw):
        raise HTTPError(400, "E_BAD_PARTITION")
    return int(raw)
