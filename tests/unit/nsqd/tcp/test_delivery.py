"""Message frames for a plain consumer: frames read from disk are queued without a copy."""

from __future__ import annotations

import trio.testing

from nsqd.core.inflight import Deliveries
from nsqd.storage import Record
from nsqd.storage.frame_runs import scan_frames
from nsqd.storage.record import encode_run
from nsqd.tcp.delivery import PLAIN_FRAME, write_plain
from nsqd.tcp.output import OutputBuffer


def _framed(offset: int, body: bytes) -> Deliveries:
    record = Record(offset, 1, offset + 1, 0, 0, body, b"")
    run = scan_frames(encode_run([record])[0], offset, offset, offset + 1, 1 << 30, 0, PLAIN_FRAME)
    assert run is not None
    taken = Deliveries()
    taken.add_framed(run)
    return taken


def test_a_run_read_from_disk_becomes_the_empty_queue() -> None:
    output = OutputBuffer(trio.testing.MemorySendStream())
    taken = _framed(0, b"x" * 1_000_000)
    frames = taken.framed[0].frames
    write_plain(output, taken)
    assert output.queue is frames  # no copy of the megabyte
    assert taken.framed[0].frames == bytearray()  # the run no longer holds them


def test_a_run_read_from_disk_follows_what_is_queued() -> None:
    output = OutputBuffer(trio.testing.MemorySendStream())
    output.append(b"OK")
    taken = _framed(3, b"y" * 100)
    frames = bytes(taken.framed[0].frames)
    write_plain(output, taken)
    assert bytes(output.queue) == b"OK" + frames
