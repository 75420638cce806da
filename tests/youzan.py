"""Helpers for the youzan-extension integration tests: HTTP admin calls, raw PUBs, and the
decoding of message frames with youzan's optional ext and detail blocks (reference §2.2)."""

from __future__ import annotations

import json
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass

import mmh3

from tests.rawclient import Frame, RawClient

OK_FRAME = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"  # [size 6][type 0]"OK"
DETAIL = struct.Struct(">QI")  # [u64 log offset][u32 raw size]
SIZE = struct.Struct(">I")


def post(address: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """POST ``path`` (with its query) to an nsqd HTTP address: (status, body)."""
    request = urllib.request.Request(f"http://{address}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(address: str, path: str) -> object:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
        return json.loads(response.read())


def create_topic(address: str, topic: str, partitions: int, **flags: str) -> None:
    query = "".join(f"&{k}={v}" for k, v in flags.items())
    status, body = post(address, f"/topic/create?topic={topic}&partition_num={partitions}{query}")
    assert status == 200, body


def sized(body: bytes) -> bytes:
    return SIZE.pack(len(body)) + body


def pub_line(topic: str, body: bytes, partition: int | None = None, cmd: str = "PUB") -> bytes:
    """``PUB <topic> [<partition>]`` + sized body, the bytes youzan go-nsq sends."""
    part = "" if partition is None else f" {partition}"
    return f"{cmd} {topic}{part}\n".encode() + sized(body)


def ext_body(header: dict[str, str] | bytes, body: bytes) -> bytes:
    """PUB_EXT payload: ``[u16 json len][json][body]``."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">H", len(raw)) + raw + body


def partition_for(key: str, partitions: int) -> int:
    """youzan go-nsq's ``PublishOrdered``: murmur3-32 (seed 0) of the key mod partition_num."""
    return int(mmh3.hash(key, 0, signed=False)) % partitions


@dataclass(frozen=True)
class Delivered:
    """A message frame decoded with the blocks the subscription asked for."""

    timestamp_ns: int
    attempts: int
    message_id: bytes
    ext_version: int | None
    ext: bytes
    offset: int | None
    raw_size: int | None
    body: bytes

    @property
    def internal_id(self) -> int:
        return int.from_bytes(self.message_id[:8], "big")

    @property
    def trace_id(self) -> int:
        return int.from_bytes(self.message_id[8:], "big")

    @property
    def partition(self) -> int:
        return (self.internal_id >> 50) & 1023


def decode(frame: Frame, *, ext: bool = False, detail: bool = False) -> Delivered:
    assert frame.is_message, frame
    data = frame.data
    timestamp, attempts = struct.unpack_from(">qH", data)
    pos = 26
    version, ext_bytes = None, b""
    if ext:
        version = data[pos]
        pos += 1
        if version:
            (length,) = struct.unpack_from(">H", data, pos)
            ext_bytes = data[pos + 2 : pos + 2 + length]
            pos += 2 + length
    offset = raw_size = None
    if detail:
        offset, raw_size = DETAIL.unpack_from(data, pos)
        pos += DETAIL.size
    return Delivered(
        timestamp, attempts, data[10:26], version, ext_bytes, offset, raw_size, data[pos:]
    )


def next_message(client: RawClient) -> Frame:
    """The next message frame (heartbeats answered with NOP)."""
    while True:
        frame = client.read()
        if frame.data == b"_heartbeat_":
            client.send(b"NOP\n")
            continue
        return frame


def fin(client: RawClient, message_id: bytes) -> None:
    client.send(b"FIN " + message_id + b"\n")
