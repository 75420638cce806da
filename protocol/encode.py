"""Client-side encoders: :data:`Command` values to the bytes a client sends.

The inverse of :class:`protocol.CommandParser`; used by pnsq's client, the tests and benchmarks.
"""

from __future__ import annotations

import struct
from typing import Final, assert_never

from .commands import (
    Auth,
    Cls,
    Command,
    Dpub,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubMode,
    Touch,
)

_SIZE: Final = struct.Struct(">I")  # body / element size prefix: u32 BE
_TRACE_ID: Final = struct.Struct(">Q")  # trace id before a PUB_TRACE body
_EXT_LEN: Final = struct.Struct(">H")  # json header length before a PUB_EXT body


def _sized(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data


def encode_mpub_body(bodies: list[bytes]) -> bytes:
    """``[n]([len][body])*`` (also the HTTP ``/mpub?binary=true`` body)."""
    return b"".join([_SIZE.pack(len(bodies)), *(_sized(b) for b in bodies)])


def _topic_line(name: str, topic: str, partition: int | None, sequence: int | None = None) -> bytes:
    if partition is None:
        return f"{name} {topic}\n".encode()
    if sequence is None:
        return f"{name} {topic} {partition}\n".encode()
    return f"{name} {topic} {partition} {sequence}\n".encode()


def encode_command(command: Command) -> bytes:
    """The wire bytes of ``command``."""
    match command:
        case Identify(body=body):
            return b"IDENTIFY\n" + _sized(body)
        case Auth(secret=secret):
            return b"AUTH\n" + _sized(secret)
        case Sub(topic=topic, channel=channel, partition=partition, mode=mode):
            parts = [mode.value, topic, channel]
            if partition is not None:
                parts.append(str(partition))
            if mode is SubMode.ADVANCED and command.consume_start is not None:
                if partition is None:
                    raise ValueError("SUB_ADVANCED with a consume start needs a partition")
                parts.append(command.consume_start)
            return (" ".join(parts) + "\n").encode()
        case Pub(topic=topic, body=body, partition=partition, sequence=sequence):
            return _topic_line("PUB", topic, partition, sequence) + _sized(body)
        case Mpub(topic=topic, bodies=bodies, partition=partition, sequence=sequence):
            line = _topic_line("MPUB", topic, partition, sequence)
            return line + _sized(encode_mpub_body(bodies))
        case Dpub(
            topic=topic, defer_ms=defer_ms, body=body, partition=partition, sequence=sequence
        ):
            rest = "" if partition is None else f" {partition}"
            rest += "" if sequence is None else f" {sequence}"
            return f"DPUB {topic} {defer_ms}{rest}\n".encode() + _sized(body)
        case PubTrace(
            topic=topic, trace_id=trace_id, body=body, partition=partition, sequence=sequence
        ):
            return _topic_line("PUB_TRACE", topic, partition, sequence) + _sized(
                _TRACE_ID.pack(trace_id) + body
            )
        case MpubTrace(topic=topic, messages=messages, partition=partition, sequence=sequence):
            elements = [_TRACE_ID.pack(t) + b for t, b in messages]
            line = _topic_line("MPUB_TRACE", topic, partition, sequence)
            return line + _sized(encode_mpub_body(elements))
        case PubExt(topic=topic, header=header, body=body, partition=partition, sequence=sequence):
            payload = _EXT_LEN.pack(len(header)) + header + body
            return _topic_line("PUB_EXT", topic, partition, sequence) + _sized(payload)
        case MpubExt(topic=topic, messages=messages, partition=partition, sequence=sequence):
            elements = [_EXT_LEN.pack(len(h)) + h + b for h, b in messages]
            line = _topic_line("MPUB_EXT", topic, partition, sequence)
            return line + _sized(encode_mpub_body(elements))
        case Rdy(count=count):
            return f"RDY {count}\n".encode()
        case Fin(message_id=message_id):
            return b"FIN " + message_id + b"\n"
        case Req(message_id=message_id, timeout_ms=timeout_ms):
            return b"REQ " + message_id + f" {timeout_ms}\n".encode()
        case Touch(message_id=message_id):
            return b"TOUCH " + message_id + b"\n"
        case Cls():
            return b"CLS\n"
        case Nop():
            return b"NOP\n"
        case InternalCreateTopic(topic=topic, partition=partition, ext=ext):
            flag = "" if ext is None else f" {str(ext).lower()}"
            return f"INTERNAL_CREATE_TOPIC {topic} {partition}{flag}\n".encode()
        case _:
            assert_never(command)
