"""Damaged data on a real nsqd: a flipped byte in a sealed segment costs that record only (logged,
counted in /metrics, the consumer's session stays open), and a damaged channel checkpoint never
stops nsqd from starting: it is moved aside and the channel resumes from the previous checkpoint,
else from the earliest retained offset (redelivery, never a skip to the tail)."""

from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path

import pytest

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

COUNT = 60
BODY = 2000


def _body(i: int) -> bytes:
    return b"msg-%05d-" % i + b"x" * (BODY - 10)


def _publish(daemon: Daemon, count: int) -> None:
    client = RawClient(daemon.tcp_address)
    for i in range(count):
        client.send(Pub("t", _body(i)))
        assert client.read().data == b"OK"
    client.close()


def _consume(client: RawClient, count: int, fin: bool = True) -> list[int]:
    """The numbers of the next ``count`` messages, FINed in order."""
    got = []
    for _ in range(count):
        frame = client.read(skip_heartbeats=True)
        assert frame.is_message, frame.data
        got.append(int(frame.body[4:9]))
        if fin:
            client.send(Fin(frame.message_id))
    return got


def _subscribe(daemon: Daemon, rdy: int = 100) -> RawClient:
    client = RawClient(daemon.tcp_address, timeout=10)
    client.send(Sub("t", "ch"), Rdy(rdy))
    assert client.read().data == b"OK"
    return client


def _metrics(daemon: Daemon) -> str:
    with urllib.request.urlopen(f"http://{daemon.http_address}/metrics", timeout=5) as reply:
        text: str = reply.read().decode()
        return text


def _state(directory: Path) -> dict[str, object] | None:
    try:
        value = json.loads((directory / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    assert isinstance(value, dict)
    return value


def _confirmed(state: dict[str, object] | None) -> int | None:
    if state is None:
        return None
    channels = state["channels"]
    assert isinstance(channels, dict)
    cursor = channels.get("ch", {})
    confirmed = cursor.get("confirmed")
    assert confirmed is None or isinstance(confirmed, int)
    return confirmed


def _wait_checkpoint(directory: Path, confirmed: int) -> None:
    deadline = time.monotonic() + 10
    while _confirmed(_state(directory)) != confirmed:
        assert time.monotonic() < deadline, _state(directory)
        time.sleep(0.02)


def test_a_flipped_byte_in_a_sealed_segment_loses_that_record_only(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path, "--max-bytes-per-file=20000").start()
    try:
        _publish(daemon, COUNT)
        daemon.stop()
        segments = sorted((tmp_path / "topics" / "t-t" / "0").glob("*.log"))
        assert len(segments) > 3
        sealed = segments[1]
        data = bytearray(sealed.read_bytes())
        at = data.find(b"msg-")
        at = data.find(b"msg-", at + 1)  # the second record of the segment
        victim = int(data[at + 4 : at + 9])
        data[at + BODY // 2] ^= 0x01  # one bit, in the body's middle
        sealed.write_bytes(bytes(data))

        daemon.start()
        client = _subscribe(daemon)
        got = _consume(client, COUNT - 1)
        assert got == [i for i in range(COUNT) if i != victim]  # in order, one lost
        client.send(Rdy(1))  # the session is still open and serving
        _publish(daemon, 1)
        assert _consume(client, 1) == [0]
        log = daemon.log_text()
        assert f"skipped corrupt records at offsets {victim}-{victim}" in log
        assert sealed.name in log
        metrics = _metrics(daemon)
        assert 'pnsq_corrupt_skipped_records_total{partition="0",topic="t"} 1.0' in metrics
        assert 'pnsq_corrupt_skipped_bytes_total{partition="0",topic="t"} 0.0' not in metrics
        client.close()
    finally:
        daemon.stop()


ACTIVE_COUNT = 1000
SMALL = 200


def _small(i: int) -> bytes:
    return b"msg-%05d-" % i + b"y" * (SMALL - 10)


@pytest.mark.parametrize("victim", [500, ACTIVE_COUNT - 3], ids=["middle", "near-the-end"])
def test_a_flipped_byte_in_the_current_segment_loses_that_record_only(
    tmp_path: Path, victim: int
) -> None:
    """One segment (the current one, not sealed) of small records, a clean restart, one bit
    flipped in a record's body: before the last index entry (found by the read) or after it
    (found by the recovery scan at start, which must not cut the acknowledged records after
    it as if they were a torn tail)."""
    daemon = pnsq_nsqd(tmp_path).start()
    try:
        client = RawClient(daemon.tcp_address)
        for i in range(ACTIVE_COUNT):
            client.send(Pub("t", _small(i)))
        for _ in range(ACTIVE_COUNT):
            assert client.read().data == b"OK"
        client.close()
        daemon.stop()
        segments = sorted((tmp_path / "topics" / "t-t" / "0").glob("*.log"))
        assert len(segments) == 1  # all of it in the current segment
        data = bytearray(segments[0].read_bytes())
        at = data.find(b"msg-%05d-" % victim)
        data[at + SMALL // 2] ^= 0x10
        segments[0].write_bytes(bytes(data))

        daemon.start()
        client = _subscribe(daemon, rdy=ACTIVE_COUNT)
        got = _consume(client, ACTIVE_COUNT - 1)
        assert got == [i for i in range(ACTIVE_COUNT) if i != victim]  # in order, one lost
        client.send(Rdy(1))  # the session is still open and serving
        _publish(daemon, 1)
        assert _consume(client, 1) == [0]
        client.close()
        log = daemon.log_text()
        assert f"skipped corrupt records at offsets {victim}-{victim}" in log
        assert log.count("skipped corrupt records") == 1  # logged once
        assert "unexpected error" not in log
        metrics = _metrics(daemon)
        assert 'pnsq_corrupt_skipped_records_total{partition="0",topic="t"} 1.0' in metrics
    finally:
        daemon.stop()


def test_a_read_that_fails_keeps_the_consumer_connected_and_others_served(
    tmp_path: Path,
) -> None:
    """A segment file gone under a running nsqd (its reads fail with an I/O error, not
    damage to step over): that partition's consumer stays connected, the error is logged a
    bounded number of times, another topic's consumer is served meanwhile."""
    daemon = pnsq_nsqd(tmp_path, "--max-bytes-per-file=20000").start()
    try:
        _publish(daemon, COUNT)
        daemon.stop()
        daemon.start()  # no fd of a sealed segment is open until a read needs one
        first = sorted((tmp_path / "topics" / "t-t" / "0").glob("*.log"))[0]
        first.unlink()
        stuck = _subscribe(daemon)
        time.sleep(3)
        assert not stuck.closed_by_server(wait=0.5)
        other = RawClient(daemon.tcp_address, timeout=10)
        other.send(Pub("u", b"elsewhere"))
        assert other.read().data == b"OK"
        other.send(Sub("u", "ch"), Rdy(1))
        assert other.read().data == b"OK"
        frame = other.read(skip_heartbeats=True)
        assert frame.is_message
        assert frame.body == b"elsewhere"
        other.close()
        stuck.close()
        log = daemon.log_text()
        assert "unexpected error" not in log
        failures = log.count("reading for delivery failed")
        assert 1 <= failures <= 2, log  # rate-limited: one line per 10 s
    finally:
        daemon.stop()


FLIP_COUNT = 300


def _flip_round(tmp_path: Path, seed: int) -> None:
    """Publish (pipelined), stop, flip one random bit of a random segment or index file of the
    partition, start, consume everything: no wrong body, every untouched record delivered."""
    rng = random.Random(seed)
    bodies = [b"%05d:" % i + rng.randbytes(rng.randrange(0, 400)) for i in range(FLIP_COUNT)]
    daemon = pnsq_nsqd(tmp_path, "--max-bytes-per-file=30000").start()
    try:
        client = RawClient(daemon.tcp_address)
        for body in bodies:
            client.send(Pub("t", body))
        for _ in bodies:
            assert client.read().data == b"OK"
        client.close()
        daemon.stop()
        directory = tmp_path / "topics" / "t-t" / "0"
        segments = sorted(directory.glob("*.log"))
        starts = [int(p.name[:20]) for p in segments] + [FLIP_COUNT]
        files = sorted(p for p in directory.iterdir() if p.suffix in (".log", ".index"))
        victim = rng.choice([p for p in files if p.stat().st_size])
        data = bytearray(victim.read_bytes())
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(data))
        touched: set[int] = set()
        if victim.suffix == ".log":  # the record whose bytes hold ``at``
            base = int(victim.name[:20])
            touched = set(range(base, starts[starts.index(base) + 1]))  # at most these

        daemon.start()
        client = RawClient(daemon.tcp_address, timeout=2)
        client.send(Sub("t", "ch"), Rdy(FLIP_COUNT))
        assert client.read().data == b"OK"
        got: dict[int, bytes] = {}
        while len(got) < FLIP_COUNT:
            try:
                frame = client.read(skip_heartbeats=True)
            except TimeoutError:
                break  # nothing more comes: the lost record, if any, is checked below
            assert frame.is_message, frame.data
            number = int(frame.body[:5])
            assert frame.body == bodies[number], f"seed {seed}: wrong body for {number}"
            got[number] = frame.body
            client.send(Fin(frame.message_id))
        lost = set(range(FLIP_COUNT)) - set(got)
        assert len(lost) <= 1, f"seed {seed}: {victim.name} byte {at}: lost {sorted(lost)}"
        assert lost <= touched, f"seed {seed}: {victim.name} byte {at}: lost {sorted(lost)}"
        client.close()
        assert "unexpected error" not in daemon.log_text()
    finally:
        daemon.stop()


@pytest.mark.parametrize("seed", range(3))
def test_a_random_flip_in_a_segment_or_index_loses_only_what_it_touched(
    tmp_path: Path, seed: int
) -> None:
    _flip_round(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 43))
def test_a_random_flip_in_a_segment_or_index_soak(tmp_path: Path, seed: int) -> None:
    _flip_round(tmp_path, seed)


def test_garbage_in_a_channel_checkpoint_resumes_from_the_previous_one(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path, "--sync-timeout=20ms").start()
    directory = tmp_path / "topics" / "t-t" / "0"
    try:
        _publish(daemon, 20)
        client = _subscribe(daemon, rdy=1)
        _consume(client, 5)
        _wait_checkpoint(directory, 5)
        for _ in range(7):
            _consume(client, 1)
            time.sleep(0.03)  # checkpoints in between: the previous generation is not 5
        _wait_checkpoint(directory, 12)
        client.close()
        daemon.stop()
        previous = json.loads((directory / "state.json.prev").read_text())
        resume = _confirmed(previous)
        assert resume is not None
        assert 5 <= resume < 12  # an older generation than the newest
        (directory / "state.json").write_bytes(b'{"topic_start":0,"channels":{"ch":{"conf')

        daemon.start()
        aside = list(directory.glob("state.json.corrupt-*"))
        assert len(aside) == 1  # moved aside, not deleted
        assert "moved it aside" in daemon.log_text()
        client = _subscribe(daemon)
        assert _consume(client, 20 - resume) == list(range(resume, 20))  # redelivered, not lost
        client.close()
    finally:
        daemon.stop()


def test_with_every_checkpoint_damaged_a_channel_starts_at_the_earliest_offset(
    tmp_path: Path,
) -> None:
    daemon = pnsq_nsqd(tmp_path, "--sync-timeout=20ms").start()
    directory = tmp_path / "topics" / "t-t" / "0"
    try:
        _publish(daemon, 10)
        client = _subscribe(daemon)
        _consume(client, 10)
        _wait_checkpoint(directory, 10)
        client.close()
        daemon.stop()
        (directory / "state.json").write_bytes(b"\x00" * 64)
        (directory / "state.json.prev").write_text('{"channels": {"ch": {"confirmed": "x"}}}')
        (tmp_path / "pnsq.dat").write_bytes(b"\xff\xfe garbage")

        daemon.start()  # starts anyway
        log = daemon.log_text()
        assert "no good checkpoint left; its channels resume at the earliest retained offset" in log
        assert len(list(tmp_path.glob("pnsq.dat.corrupt-*"))) == 1
        client = _subscribe(daemon)
        assert _consume(client, 10) == list(range(10))  # all of it again, never the tail
        client.close()
    finally:
        daemon.stop()
