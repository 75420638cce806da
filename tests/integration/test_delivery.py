"""Delivery semantics over real TCP: timeouts, TOUCH, REQ delays, ephemeral, heartbeats."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
from pathlib import Path

import pytest

from protocol import Cls, Fin, Nop, Pub, Rdy, Req, Sub, Touch
from tests.daemons import Daemon, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def consumer(
    nsqd: Daemon, topic: str, channel: str, rdy: int = 10, **identify: object
) -> RawClient:
    c = RawClient(nsqd.tcp_address)
    assert c.identify(**identify).type == 0
    c.send(Sub(topic, channel), Rdy(rdy))
    assert c.read().data == b"OK"
    return c


def publish(nsqd: Daemon, topic: str, *bodies: bytes) -> None:
    p = RawClient(nsqd.tcp_address)
    p.send(*(Pub(topic, b) for b in bodies))
    assert [p.read().data for _ in bodies] == [b"OK"] * len(bodies)
    p.close()


def test_in_flight_timeout_redelivers_with_attempts_plus_one(nsqd: Daemon) -> None:
    c = consumer(nsqd, "to", "ch", msg_timeout=1000)
    publish(nsqd, "to", b"late")
    first = c.read(skip_heartbeats=True)
    started = time.monotonic()
    again = c.read(skip_heartbeats=True)  # not FINed: comes back after msg_timeout
    assert time.monotonic() - started >= 0.9
    assert (again.message_id, again.body, again.attempts) == (first.message_id, b"late", 2)
    c.send(Fin(again.message_id), Nop())
    assert not c.closed_by_server(1.5)  # nothing else arrives; FIN was accepted


def test_touch_keeps_a_message_in_flight(nsqd: Daemon) -> None:
    c = consumer(nsqd, "touch", "ch", msg_timeout=1000)
    publish(nsqd, "touch", b"slow")
    m = c.read(skip_heartbeats=True)
    for _ in range(4):  # 2 s of work in 0.5 s steps, each TOUCH pushing the deadline
        time.sleep(0.5)
        c.send(Touch(m.message_id))
    c.send(Fin(m.message_id))
    c.sock.settimeout(1.5)
    with pytest.raises(TimeoutError):
        c.read(skip_heartbeats=True)  # no redelivery: the TOUCHes kept it in flight


def test_req_with_delay_is_not_delivered_before_it(nsqd: Daemon) -> None:
    c = consumer(nsqd, "reqd", "ch")
    publish(nsqd, "reqd", b"again")
    m = c.read(skip_heartbeats=True)
    c.send(Req(m.message_id, 1000))
    started = time.monotonic()
    again = c.read(skip_heartbeats=True)
    assert time.monotonic() - started >= 0.95
    assert again.attempts == 2


def test_rdy_limits_unacknowledged_messages(nsqd: Daemon) -> None:
    publish(nsqd, "rdy", *(b"m%d" % i for i in range(5)))
    c = consumer(nsqd, "rdy", "ch", rdy=2)
    got = [c.read(skip_heartbeats=True), c.read(skip_heartbeats=True)]
    c.sock.settimeout(0.7)
    with pytest.raises(TimeoutError):
        c.read(skip_heartbeats=True)  # window full
    c.sock.settimeout(5)
    c.send(Fin(got[0].message_id))
    assert c.read(skip_heartbeats=True).body == b"m2"


def test_messages_before_first_channel_go_to_it_only(nsqd: Daemon) -> None:
    publish(nsqd, "kept", b"old")
    first = consumer(nsqd, "kept", "first")
    assert first.read(skip_heartbeats=True).body == b"old"
    second = consumer(nsqd, "kept", "second")  # a later channel starts at the end
    publish(nsqd, "kept", b"new")
    assert first.read(skip_heartbeats=True).body == b"new"
    assert second.read(skip_heartbeats=True).body == b"new"


def test_ephemeral_channel_and_topic_vanish_with_their_last_client(nsqd: Daemon) -> None:
    c = consumer(nsqd, "eph#ephemeral", "ch#ephemeral")
    publish(nsqd, "eph#ephemeral", b"x")
    assert c.read(skip_heartbeats=True).body == b"x"
    c.send(Cls())
    assert c.read().data == b"CLOSE_WAIT"
    c.close()
    time.sleep(0.5)
    assert not list((nsqd.data_path / "topics").glob("*eph*"))  # never on disk
    # the topic went with its last channel: a new channel does not see old messages
    publish(nsqd, "eph#ephemeral", b"y")
    c2 = consumer(nsqd, "eph#ephemeral", "other#ephemeral")
    publish(nsqd, "eph#ephemeral", b"z")
    assert c2.read(skip_heartbeats=True).body == b"y"  # y was kept for the topic's first channel
    meta = json.loads((nsqd.data_path / "pnsq.dat").read_text())
    assert all("ephemeral" not in t["name"] for t in meta["topics"])


def test_a_plain_channel_of_an_ephemeral_topic_stays_when_its_client_leaves(
    nsqd: Daemon,
) -> None:
    """As nsqd: only a channel named #ephemeral goes with its last client (a plain one of an
    #ephemeral topic stays, and keeps the topic and what is published meanwhile)."""
    c = consumer(nsqd, "ephx#ephemeral", "d")
    c.send(Cls())
    assert c.read().data == b"CLOSE_WAIT"
    c.close()
    time.sleep(0.5)
    publish(nsqd, "ephx#ephemeral", b"while away")
    [topic] = get_json(nsqd, "/stats?format=json&topic=ephx%23ephemeral")["topics"]
    assert [(ch["channel_name"], ch["depth"]) for ch in topic["channels"]] == [("d", 1)]
    back = consumer(nsqd, "ephx#ephemeral", "d")
    assert back.read(skip_heartbeats=True).body == b"while away"


def test_silent_client_is_closed_after_two_heartbeat_intervals(nsqd: Daemon) -> None:
    c = RawClient(nsqd.tcp_address, timeout=10)
    c.identify(heartbeat_interval=1000)
    started = time.monotonic()
    frames = []
    c.sock.settimeout(5)
    try:
        while True:
            frames.append(c.read())
    except ConnectionError:
        pass
    elapsed = time.monotonic() - started
    assert [f.data for f in frames] == [b"_heartbeat_"] * len(frames)
    assert len(frames) >= 1
    assert 1.8 <= elapsed <= 3.5


def test_http_pub_reaches_a_tcp_consumer(nsqd: Daemon) -> None:
    c = consumer(nsqd, "web", "ch")
    req = urllib.request.Request(f"http://{nsqd.http_address}/pub?topic=web", b"hi", method="POST")
    with urllib.request.urlopen(req) as r:
        assert r.read() == b"OK"
    assert c.read(skip_heartbeats=True).body == b"hi"


def test_sample_rate_drops_the_rest_for_good(nsqd: Daemon) -> None:
    publish(nsqd, "sampled", *(b"%d" % i for i in range(200)))
    c = consumer(nsqd, "sampled", "ch", rdy=200, sample_rate=50)
    got = []
    c.sock.settimeout(1.0)
    try:
        while True:
            frame = c.read(skip_heartbeats=True)
            got.append(frame.body)
            c.send(Fin(frame.message_id))
    except TimeoutError:
        pass
    assert 40 < len(got) < 160  # about half, each message at most once
    assert len(got) == len(set(got))
    c2 = consumer(nsqd, "sampled", "ch", rdy=200)  # the skipped ones are gone, not requeued
    c2.sock.settimeout(1.0)
    with pytest.raises(TimeoutError):
        c2.read(skip_heartbeats=True)


def test_max_channel_consumers(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "d", "--max-channel-consumers=1").start()
    try:
        first = consumer(daemon, "lim", "ch")  # keep it connected
        c = RawClient(daemon.tcp_address)
        c.send(Sub("lim", "ch"))
        assert c.read().data == b"E_SUB_FAILED SUB failed consumers for lim:ch exceeds limit of 1"
        assert c.closed_by_server()
        first.close()
    finally:
        daemon.stop()


def test_a_client_reset_does_not_take_the_daemon_down(nsqd: Daemon) -> None:
    for round_ in range(3):
        c = consumer(nsqd, "rst", "ch", rdy=100)
        # the previous client's messages stay in flight until they time out, as in nsqd
        publish(nsqd, "rst", *(b"%d-%d" % (round_, i) for i in range(50)))
        c.read(skip_heartbeats=True)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # RST with unread frames in flight
    c = consumer(nsqd, "rst", "other")
    publish(nsqd, "rst", b"still here")
    assert c.read(skip_heartbeats=True).body == b"still here"
    assert "Traceback" not in nsqd.log_text()


def test_a_consumer_that_stops_reading_is_dropped(nsqd: Daemon) -> None:
    c = consumer(nsqd, "stuck", "ch", rdy=2500, heartbeat_interval=1000)
    big = b"x" * 1_000_000
    for _ in range(8):  # far more than the socket buffers hold
        publish(nsqd, "stuck", *([big] * 5))
    deadline = time.monotonic() + 8
    while "write blocked" not in nsqd.log_text() and time.monotonic() < deadline:
        c.send(Nop())  # still talking, so only the write deadline can fire
        time.sleep(0.3)
    assert "write blocked" in nsqd.log_text()


@pytest.mark.parametrize("daemon", ["pnsq", "go"])
def test_a_run_of_fins_with_one_unknown_id_answers_that_one_only(
    daemon: str, nsqd: Daemon, real_nsqd: Daemon
) -> None:
    """FINs sent in one write are taken as a run; the refused one gets its error in place,
    the others are finished, as on Go nsqd."""
    node = nsqd if daemon == "pnsq" else real_nsqd
    publish(node, "finrun", b"a", b"b", b"c")
    client = consumer(node, "finrun", "ch", 3)
    ids = [client.read(skip_heartbeats=True).message_id for _ in range(3)]
    bogus = bytes(16) if daemon == "pnsq" else b"0" * 16
    client.send(Fin(ids[0]), Fin(bogus), Fin(ids[1]), Fin(ids[2]), Nop())
    error = client.read()
    assert error.data.startswith(b"E_FIN_FAILED FIN ")
    assert error.data.endswith(b" failed ID not in flight")
    deadline = time.monotonic() + 5  # Go handles the FINs after the error in its own time
    while True:
        with urllib.request.urlopen(f"http://{node.http_address}/stats?format=json") as reply:
            stats = json.load(reply)
        (topic,) = [t for t in stats["topics"] if t["topic_name"] == "finrun"]
        in_flight = topic["channels"][0]["in_flight_count"]
        if in_flight == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert in_flight == 0
    client.close()
