"""HTTP consume with server-kept offsets (``POST /consume``, ``/consume/ack``, ``/consume/nack``)
against real nsqd processes."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from protocol import Fin, Rdy, Sub
from tests.daemons import Daemon, pnsq_nsqd
from tests.fuzz.run import accepted
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def _post(daemon: Daemon, path: str, body: bytes = b"", **params: object) -> tuple[int, Any]:
    query = urllib.parse.urlencode(params)
    url = f"http://{daemon.http_address}{path}" + (f"?{query}" if query else "")
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=40) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def _stats(daemon: Daemon, topic: str) -> dict[str, Any]:
    url = f"http://{daemon.http_address}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        document = json.load(reply)
    (found,) = [t for t in document["topics"] if t["topic_name"] == topic]
    return dict(found)


def _create(daemon: Daemon, topic: str, partitions: int, **flags: str) -> None:
    status, _ = _post(daemon, "/topic/create", topic=topic, partition_num=partitions, **flags)
    assert status == 200


def _publish(daemon: Daemon, topic: str, partition: int, bodies: list[bytes]) -> None:
    status, reply = _post(daemon, "/mpub", b"\n".join(bodies), topic=topic, partition=partition)
    assert status == 200, reply


def _consume(daemon: Daemon, topic: str, channel: str, **params: object) -> dict[str, Any]:
    status, reply = _post(daemon, "/consume", topic=topic, channel=channel, **params)
    assert status == 200, reply
    return dict(reply)


def _bodies(batch: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(m["body"]) for m in batch["messages"]]


def test_four_consumers_drain_2000_messages_over_4_partitions_each_once_in_order(
    nsqd: Daemon,
) -> None:
    _create(nsqd, "hc", 4)
    for partition in range(4):
        _publish(nsqd, "hc", partition, [b"%d:%03d" % (partition, i) for i in range(500)])
    received: list[tuple[int, list[int], list[bytes]]] = []  # in the order batches came
    lock = threading.Lock()
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            empty = 0
            while empty < 2:
                batch = _consume(nsqd, "hc", "ch", max=37, wait_ms=300)
                if not batch["messages"]:
                    empty += 1
                    continue
                empty = 0
                offsets = [m["offset"] for m in batch["messages"]]
                assert {m["partition"] for m in batch["messages"]} == {batch["partition"]}
                with lock:
                    received.append((batch["partition"], offsets, _bodies(batch)))
                status, reply = _post(nsqd, "/consume/ack", token=batch["token"])
                assert (status, reply) == (200, b"OK")
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for partition, offsets, bodies in received:
        # a batch is a run of its partition's log, in order (batches of one partition may be
        # out at once, so the threads may have received them in any order)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        by_partition[partition].extend(zip(offsets, bodies, strict=True))
    for partition in range(4):
        # every message exactly once
        assert sorted(by_partition[partition]) == [
            (i, b"%d:%03d" % (partition, i)) for i in range(500)
        ]
    (channel,) = _stats(nsqd, "hc")["channels"]
    for part in channel["partitions"]:
        assert part["confirmed_offset"] == part["end_offset"] == 500
        assert part["in_flight_count"] == 0
    assert channel["depth"] == 0


def test_an_unacked_batch_comes_back_after_its_lease_with_attempts_2(nsqd: Daemon) -> None:
    _publish(nsqd, "lease", 0, [b"a", b"b", b"c"])
    first = _consume(nsqd, "lease", "ch", max=10, lease_ms=300)
    assert _bodies(first) == [b"a", b"b", b"c"]
    assert [m["attempts"] for m in first["messages"]] == [1, 1, 1]
    # its messages are the batch's: nothing for another request meanwhile
    assert _consume(nsqd, "lease", "ch", max=10)["token"] is None
    (channel,) = _stats(nsqd, "lease")["channels"]
    assert channel["in_flight_count"] == 3
    again = _consume(nsqd, "lease", "ch", max=10, wait_ms=5000)
    assert again["token"] not in (None, first["token"])
    assert [m["id"] for m in again["messages"]] == [m["id"] for m in first["messages"]]
    assert [m["attempts"] for m in again["messages"]] == [2, 2, 2]
    assert _post(nsqd, "/consume/ack", token=first["token"]) == (
        409,
        {"message": "TOKEN_EXPIRED"},
    )
    assert _post(nsqd, "/consume/ack", token="no-such-token") == (
        409,
        {"message": "TOKEN_INVALID"},
    )
    assert _post(nsqd, "/consume/ack", token=again["token"]) == (200, b"OK")
    assert _post(nsqd, "/consume/ack", token=again["token"]) == (
        409,
        {"message": "TOKEN_EXPIRED"},
    )


@pytest.mark.parametrize("ending", ["lease expires", "nack 0"])
def test_a_batch_that_comes_back_is_the_partitions_next_batch(nsqd: Daemon, ending: str) -> None:
    """The offsets model: an expired (or nacked, no delay) batch is handed out again before
    the messages behind it, attempts + 1, and per-partition order holds."""
    topic = "back" + ending.split()[0]
    _publish(nsqd, topic, 0, [b"m%d" % i for i in range(6)])
    first = _consume(nsqd, topic, "ch", max=3, lease_ms=300)
    assert _bodies(first) == [b"m0", b"m1", b"m2"]
    if ending == "nack 0":
        assert _post(nsqd, "/consume/nack", token=first["token"], delay_ms=0) == (200, b"OK")
    else:  # the lease ends (before, another request would get the messages behind it)
        time.sleep(0.5)
    again = _consume(nsqd, topic, "ch", max=3, wait_ms=5000)
    assert _bodies(again) == [b"m0", b"m1", b"m2"]
    assert [m["attempts"] for m in again["messages"]] == [2, 2, 2]
    assert _post(nsqd, "/consume/ack", token=again["token"]) == (200, b"OK")
    assert _bodies(_consume(nsqd, topic, "ch", max=3)) == [b"m3", b"m4", b"m5"]


def test_nack_requeues_the_batch_after_its_delay_as_deferred(nsqd: Daemon) -> None:
    _publish(nsqd, "nack", 0, [b"x", b"y"])
    batch = _consume(nsqd, "nack", "ch", max=5)
    assert _post(nsqd, "/consume/nack", token=batch["token"], delay_ms=400) == (200, b"OK")
    (channel,) = _stats(nsqd, "nack")["channels"]
    assert (channel["deferred_count"], channel["in_flight_count"]) == (2, 0)
    assert _consume(nsqd, "nack", "ch", max=5)["token"] is None  # not before its delay
    again = _consume(nsqd, "nack", "ch", max=5, wait_ms=5000)
    assert sorted(_bodies(again)) == [b"x", b"y"]
    assert {m["attempts"] for m in again["messages"]} == {2}


def test_kill_9_midway_resumes_from_the_committed_offsets(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        _create(daemon, "k9", 2)
        for partition in range(2):
            _publish(daemon, "k9", partition, [b"%d-%03d" % (partition, i) for i in range(300)])
        acked: set[str] = set()
        for _ in range(6):
            batch = _consume(daemon, "k9", "ch", max=40)
            assert batch["messages"]
            assert _post(daemon, "/consume/ack", token=batch["token"]) == (200, b"OK")
            acked.update(m["id"] for m in batch["messages"])
        unacked = _consume(daemon, "k9", "ch", max=40)  # in flight at the kill: comes back
        daemon.kill()  # right after the acks' 200: nothing acked may come back
        daemon.start()
        seen: list[str] = []
        while True:
            batch = _consume(daemon, "k9", "ch", max=100, wait_ms=200)
            if not batch["messages"]:
                break
            seen.extend(m["id"] for m in batch["messages"])
            assert _post(daemon, "/consume/ack", token=batch["token"]) == (200, b"OK")
        assert not acked & set(seen)
        assert {m["id"] for m in unacked["messages"]} <= set(seen)
        assert len(acked) + len(seen) == 600
        assert len(set(seen)) == len(seen)
        (channel,) = _stats(daemon, "k9")["channels"]
        assert [p["confirmed_offset"] for p in channel["partitions"]] == [300, 300]
    finally:
        daemon.stop()


def test_curl_only_smoke(nsqd: Daemon) -> None:
    base = f"http://{nsqd.http_address}"

    def curl(*args: str) -> str:
        out = subprocess.run(
            ["curl", "-sS", "-X", "POST", *args], check=True, capture_output=True, timeout=30
        )
        return out.stdout.decode()

    assert curl("--data-binary", "hello", f"{base}/pub?topic=smoke") == "OK"
    batch = json.loads(curl(f"{base}/consume?topic=smoke&channel=c&max=10&wait_ms=1000"))
    assert [base64.b64decode(m["body"]) for m in batch["messages"]] == [b"hello"]
    assert curl(f"{base}/consume/ack?token={batch['token']}") == "OK"
    empty = json.loads(curl(f"{base}/consume?topic=smoke&channel=c&max=10"))
    assert empty == {"token": None, "partition": None, "messages": []}


def test_ordered_partitions_go_batch_after_batch_in_order(nsqd: Daemon) -> None:
    _create(nsqd, "ord", 1, orderedmulti="true")
    _publish(nsqd, "ord", 0, [b"%03d" % i for i in range(60)])
    first = _consume(nsqd, "ord", "ch", max=25)
    assert _bodies(first) == [b"%03d" % i for i in range(25)]
    assert _consume(nsqd, "ord", "ch", max=25)["token"] is None  # locked to the batch
    assert _post(nsqd, "/consume/nack", token=first["token"]) == (200, b"OK")
    again = _consume(nsqd, "ord", "ch", max=25)  # ordered: the same run again, in order
    assert _bodies(again) == [b"%03d" % i for i in range(25)]
    assert {m["attempts"] for m in again["messages"]} == {2}
    got = _bodies(again)
    token = again["token"]
    while True:
        assert _post(nsqd, "/consume/ack", token=token) == (200, b"OK")
        batch = _consume(nsqd, "ord", "ch", max=25, wait_ms=200)
        if batch["token"] is None:
            break
        got.extend(_bodies(batch))
        token = batch["token"]
    assert got == [b"%03d" % i for i in range(60)]


def test_beside_a_tcp_consumer_of_the_same_channel_each_message_goes_once(
    nsqd: Daemon,
) -> None:
    _publish(nsqd, "both", 0, [b"%03d" % i for i in range(200)])
    tcp = RawClient(nsqd.tcp_address)
    tcp.send(Sub("both", "ch", 0), Rdy(7))
    assert tcp.read().data == b"OK"
    via_tcp: list[bytes] = []
    via_http: list[bytes] = []
    while len(via_tcp) + len(via_http) < 200:
        batch = _consume(nsqd, "both", "ch", max=10, wait_ms=100)
        if batch["token"] is not None:
            via_http.extend(_bodies(batch))
            assert _post(nsqd, "/consume/ack", token=batch["token"]) == (200, b"OK")
        for _ in range(7):
            try:
                frame = tcp.read(skip_heartbeats=True)
            except TimeoutError:
                break
            via_tcp.append(frame.body)
            tcp.send(Fin(frame.message_id))
    assert via_tcp
    assert via_http
    assert sorted(via_tcp + via_http) == [b"%03d" % i for i in range(200)]
    tcp.close()


def test_pause_setoffset_and_stats_apply_to_http_consumers(nsqd: Daemon) -> None:
    _publish(nsqd, "adm", 0, [b"a", b"b", b"c"])
    assert _consume(nsqd, "adm", "ch", max=1)["messages"]  # creates the channel; leased
    assert _post(nsqd, "/channel/pause", topic="adm", channel="ch")[0] == 200
    assert _consume(nsqd, "adm", "ch", max=10, wait_ms=300)["token"] is None
    assert _post(nsqd, "/channel/unpause", topic="adm", channel="ch")[0] == 200
    second = _consume(nsqd, "adm", "ch", max=10, wait_ms=300)  # beside the first batch
    assert _bodies(second) == [b"b", b"c"]
    (channel,) = _stats(nsqd, "adm")["channels"]
    assert (channel["depth"], channel["in_flight_count"]) == (0, 3)
    with urllib.request.urlopen(f"http://{nsqd.http_address}/metrics", timeout=5) as reply:
        metrics = reply.read().decode()
    in_flight = [
        line
        for line in metrics.splitlines()
        if line.startswith("nsq_channel_in_flight_count{") and 'topic="adm"' in line
    ]
    assert [line.rsplit(" ", 1)[1] for line in in_flight] == ["3.0"]
    # a replay drops what is in flight: the leases are over, the batches belong to the next
    status, _ = _post(nsqd, "/channel/setoffset", b"virtual_queue:0", topic="adm", channel="ch")
    assert status == 200
    replay = _consume(nsqd, "adm", "ch", max=10)
    assert _bodies(replay) == [b"a", b"b", b"c"]
    assert _post(nsqd, "/consume/ack", token=replay["token"]) == (200, b"OK")
    assert _post(nsqd, "/consume/ack", token=second["token"]) == (
        409,
        {"message": "TOKEN_EXPIRED"},
    )


def test_bad_requests_are_refused_with_nsqd_style_errors(nsqd: Daemon) -> None:
    assert _post(nsqd, "/consume", channel="c") == (400, {"message": "MISSING_ARG_TOPIC"})
    assert _post(nsqd, "/consume", topic="t") == (400, {"message": "MISSING_ARG_CHANNEL"})
    assert _post(nsqd, "/consume", topic="t!", channel="c") == (
        400,
        {"message": "INVALID_ARG_TOPIC"},
    )
    assert _post(nsqd, "/consume", topic="t", channel="c", max=0) == (
        400,
        {"message": "INVALID_MAX"},
    )
    assert _post(nsqd, "/consume", topic="t", channel="c", wait_ms="soon") == (
        400,
        {"message": "INVALID_WAIT_MS"},
    )
    assert _post(nsqd, "/consume/ack") == (400, {"message": "MISSING_ARG_TOKEN"})
    status, _ = _post(nsqd, "/consume/nack", token="x", delay_ms=-1)
    assert status == 400


def test_the_javascript_example_consumes_with_nothing_but_http(nsqd: Daemon) -> None:
    """``examples/http-consumer.mjs`` (Node.js fetch, no NSQ library) drains a channel; run
    again it prints nothing: the server kept its offsets."""
    bodies = [b"line %d" % i for i in range(250)]
    _publish(nsqd, "js", 0, bodies)
    script = str(Path(__file__).parents[2] / "examples" / "http-consumer.mjs")
    argv = ["node", script, nsqd.http_address, "js", "ch", "--until-empty"]
    first = subprocess.run(argv, check=True, capture_output=True, timeout=60)
    assert first.stdout.decode().splitlines() == [b.decode() for b in bodies]
    second = subprocess.run(argv, check=True, capture_output=True, timeout=60)
    assert second.stdout == b""


def test_a_deferred_publish_is_given_only_when_due(nsqd: Daemon) -> None:
    assert _post(nsqd, "/pub", b"later", topic="dpub", defer=600) == (200, b"OK")
    assert _post(nsqd, "/pub", b"now", topic="dpub") == (200, b"OK")
    first = _consume(nsqd, "dpub", "ch", max=10)  # creates the channel: it starts at the top
    assert _bodies(first) == [b"now"]
    assert _post(nsqd, "/consume/ack", token=first["token"]) == (200, b"OK")
    assert _consume(nsqd, "dpub", "ch", max=10)["token"] is None
    later = _consume(nsqd, "dpub", "ch", max=10, wait_ms=5000)
    assert _bodies(later) == [b"later"]


def test_sigterm_answers_a_parked_long_poll_with_an_empty_batch(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        _create(daemon, "bye", 2)
        answers: list[tuple[int, Any]] = []
        errors: list[BaseException] = []

        def poll() -> None:
            try:
                answers.append(_post(daemon, "/consume", topic="bye", channel="c", wait_ms=30_000))
            except BaseException as exc:  # noqa: BLE001 - the connection cut is the failure
                errors.append(exc)

        poller = threading.Thread(target=poll)
        poller.start()
        # the channel appears when the poll has parked (nothing awaits between the two)
        while not _stats(daemon, "bye")["channels"]:
            assert poller.is_alive()
        assert daemon.stop() == 0  # SIGTERM: the parked poll is answered, then a clean exit
        poller.join(10)
        assert not errors
        assert answers == [(200, {"token": None, "partition": None, "messages": []})]
    finally:
        daemon.stop()


def test_a_long_poll_whose_client_left_ends_and_takes_nothing(nsqd: Daemon) -> None:
    _create(nsqd, "gone", 1)
    client = socket.create_connection(("127.0.0.1", nsqd.http_port))
    client_port = client.getsockname()[1]
    client.sendall(
        b"POST /consume?topic=gone&channel=c&wait_ms=30000 HTTP/1.1\r\n"
        b"Host: pnsq\r\nContent-Length: 0\r\n\r\n"
    )
    while not _stats(nsqd, "gone")["channels"]:  # parked
        time.sleep(0.01)
    client.close()
    time.sleep(0.1)
    deadline = time.monotonic() + 5
    assert nsqd.proc is not None
    while any(peer == client_port for _, peer, _ in accepted(nsqd.proc.pid)):  # server side open
        assert time.monotonic() < deadline, "the left long poll still holds its connection"
        time.sleep(0.05)
    # and a message published now goes to the next consumer, not to the poll nobody reads
    _publish(nsqd, "gone", 0, [b"for the next one"])
    batch = _consume(nsqd, "gone", "c", wait_ms=2000)
    assert _bodies(batch) == [b"for the next one"]
