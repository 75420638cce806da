"""The disk high-water mark on a real 64 MiB tmpfs: past ``--max-disk-usage-percent`` nsqd refuses
publishes with ``E_FAILED_ON_NOT_WRITABLE`` (TCP, non-fatal; HTTP 400), ``/ping`` answers
``500 NOK - <reason>``, nothing acknowledged is lost (not even across kill -9), and writes resume
by themselves once space frees."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import Fin, Nop, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

SIZE_MB = 64
MARK = 80
BODY = 100 * 1024
REFUSED = b"E_FAILED_ON_NOT_WRITABLE "


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs of its own (the tests run as root, as CI does)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (root needed): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _usage(path: Path) -> float:
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return 100.0 * used / (used + st.f_bavail * st.f_frsize)


def _ping(daemon: Daemon) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{daemon.http_address}/ping", timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _get(daemon: Daemon, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{daemon.http_address}{path}", timeout=5) as reply:
        body: bytes = reply.read()
        return body


def _http_pub(daemon: Daemon, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://{daemon.http_address}/pub?topic=full", data=body, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _fill(client: RawClient, acked: list[bytes]) -> bytes:
    """Publish until refused; returns the refusal's frame data."""
    for i in range(SIZE_MB * 1024 * 1024 // BODY):
        body = b"%06d" % len(acked) + b"x" * (BODY - 6)
        client.send(Pub("full", body))
        reply = client.read().data
        if reply != b"OK":
            return reply
        acked.append(body[:6])
        del i
    raise AssertionError("the disk never reached its mark")


def _consume_all(daemon: Daemon, expected: int) -> set[bytes]:
    c = RawClient(daemon.tcp_address, timeout=10)
    c.send(Sub("full", "ch"), Rdy(100))
    assert c.read().data == b"OK"
    seen: set[bytes] = set()
    while len(seen) < expected:
        frame = c.read(skip_heartbeats=True)
        assert frame.is_message, frame.data
        seen.add(frame.body[:6])
        c.send(Fin(frame.message_id))
    c.close()
    return seen


def test_past_the_mark_writes_are_refused_and_resume_by_themselves(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (16 * 1024 * 1024))  # what the operator frees later
    data = small_disk / "nsqd"
    daemon = pnsq_nsqd(
        data, f"--max-disk-usage-percent={MARK}", "--max-bytes-per-file=4194304"
    ).start()
    try:
        client = RawClient(daemon.tcp_address)
        acked: list[bytes] = []
        assert _fill(client, acked) == REFUSED
        assert len(acked) > 100
        assert _usage(small_disk) < 95  # refused at the mark, not when the disk was full
        client.send(Nop(), Pub("full", b"still refused"))  # non-fatal: the connection stays
        assert client.read().data == REFUSED
        client.send(Pub("full", b"1"), Pub("full", b"2"), Pub("full", b"3"))  # one group commit
        assert [client.read().data for _ in range(3)] == [REFUSED] * 3  # one reply per PUB
        metrics = _get(daemon, "/metrics").decode()
        assert "pnsq_disk_writable 0.0" in metrics
        assert f"pnsq_disk_usage_max_ratio {MARK / 100}" in metrics
        assert _http_pub(daemon, b"http") == (400, b'{"message":"E_FAILED_ON_NOT_WRITABLE"}')
        status, text = _ping(daemon)
        assert status == 500
        assert text.startswith(b"NOK - disk usage ")
        assert f"--max-disk-usage-percent={MARK}".encode() in text
        assert "refusing writes: disk usage" in daemon.log_text()

        daemon.kill()  # nothing acknowledged may be lost, even past the mark
        daemon.start()
        assert _consume_all(daemon, len(acked)) == set(acked)

        filler.unlink()  # the operator frees space: writes resume without a restart
        client = RawClient(daemon.tcp_address)
        deadline = time.monotonic() + 10
        while True:
            client.send(Pub("full", b"resumed"))
            reply = client.read().data
            if reply == b"OK" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert reply == b"OK"
        assert _ping(daemon) == (200, b"OK")
        assert "writes resume" in daemon.log_text()
        client.close()
    finally:
        daemon.stop()


def test_a_full_disk_refuses_writes_without_closing_and_recovers(small_disk: Path) -> None:
    """At a mark of 100 the file system itself says ENOSPC: the same refusal, /ping NOK."""
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (8 * 1024 * 1024))
    daemon = pnsq_nsqd(
        small_disk / "nsqd", "--max-disk-usage-percent=100", "--max-bytes-per-file=4194304"
    ).start()
    try:
        client = RawClient(daemon.tcp_address)
        acked: list[bytes] = []
        assert _fill(client, acked) == REFUSED
        client.send(Nop(), Pub("full", b"x"))  # the connection is still open
        assert client.read().data == REFUSED
        status, text = _ping(daemon)
        assert status == 500
        assert text.startswith(b"NOK - ")
        filler.unlink()
        deadline = time.monotonic() + 10
        while _ping(daemon)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        client.send(Pub("full", b"after"))
        assert client.read().data == b"OK"
        client.close()
        assert _consume_all(daemon, len(acked) + 1) >= set(acked)
    finally:
        daemon.stop()
