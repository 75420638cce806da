"""A plain consumer's new messages read from disk go out as the frames the log read wrote
(nsqd/storage/frame_runs.py); REQ, TOUCH, a timeout and FIN with end-to-end latency on then
work on records decoded when asked for (a real listener on loopback, a raw V2 client)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import trio
import trio.testing

from nsqd.core.inflight import Flight
from nsqd.storage import FrameRun
from tests.unit.nsqd.tcp.test_publish_reactor import (
    BODY_AT,
    MESSAGE,
    RESPONSE,
    Client,
    connect,
    listening,
)

_MESSAGE = struct.Struct(">qH")  # a message frame's timestamp and attempts


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    parts = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    return b"MPUB %s\n" % topic.encode() + struct.pack(">II", len(parts) + 4, len(bodies)) + parts


async def messages(client: Client, count: int) -> list[tuple[int, bytes, bytes]]:
    """``count`` message frames: (attempts, id, body) each."""
    out = []
    for _ in range(count):
        kind, data = await client.frame()
        assert kind == MESSAGE, data
        out.append((_MESSAGE.unpack_from(data)[1], data[10:BODY_AT], data[BODY_AT:]))
    return out


async def test_messages_read_from_disk_go_out_as_written_frames(tmp_path: Path) -> None:
    config = {"read_cache_bytes": 0, "e2e_percentiles": (0.99,)}
    async with listening(tmp_path, **config) as (broker, _, port):  # type: ignore[arg-type]
        consumer = await connect(port)
        identify = json.dumps({"msg_timeout": 1000}).encode()
        with trio.fail_after(20):
            await consumer.stream.send_all(b"IDENTIFY\n" + struct.pack(">I", len(identify)))
            await consumer.stream.send_all(identify)
            kind, _ = await consumer.frame()
            assert kind == RESPONSE
            await consumer.stream.send_all(b"SUB t c\n")
            assert await consumer.frame() == (RESPONSE, b"OK")
            publisher = await connect(port)
            bodies = [b"message %02d " % i * (i % 5 + 1) for i in range(50)]
            await publisher.stream.send_all(mpub("t", bodies))
            assert await publisher.frame() == (RESPONSE, b"OK")

            await consumer.stream.send_all(b"RDY 50\n")
            first = await messages(consumer, 50)
            assert [body for _, _, body in first] == bodies
            assert {attempts for attempts, _, _ in first} == {1}
            cursor = broker.topics["t"].channels["c"].cursor_for(0)
            flight = cursor.in_flight[0]
            assert isinstance(flight, Flight)
            assert isinstance(flight.records, FrameRun)  # the log read's frames went out

            ids = [message_id for _, message_id, _ in first]
            await consumer.stream.send_all(b"".join(b"FIN %s\n" % i for i in ids[:10]))
            await consumer.stream.send_all(b"REQ %s 0\nTOUCH %s\n" % (ids[10], ids[11]))
            again = await messages(consumer, 1)  # the REQ: its record decoded from the run
            assert again == [(2, ids[10], bodies[10])]
            # the rest time out after 1 s (the touched one a little later) and come back
            back = await messages(consumer, 39)
            assert sorted(back) == sorted((2, ids[i], bodies[i]) for i in range(11, 50))
            everything = [again[0][1]] + [message_id for _, message_id, _ in back]
            await consumer.stream.send_all(b"".join(b"FIN %s\n" % i for i in everything))
            await consumer.stream.send_all(b"NOP\n")
            while cursor.in_flight or cursor.confirmed < 50:
                await trio.sleep(0.01)
        channel = broker.topics["t"].channels["c"]
        assert channel.depth == 0
