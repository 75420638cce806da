"""The blocking forms of the client (``pnsq.client.blocking.Producer`` / ``Consumer``) against a
real pnsq nsqd: publish in every form, consume with finish / requeue / touch, no Trio in the
caller's thread."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import trio

from pnsq.client import open_producer
from pnsq.client.blocking import Consumer, Message, Producer
from pnsq.client.errors import NsqError
from pnsq.client.routing import partition_for_key
from tests.daemons import ROOT, Daemon

pytestmark = pytest.mark.integration

TIMEOUT = 10.0


def create_topic(nsqd: Daemon, topic: str, partitions: int) -> None:
    url = f"http://{nsqd.http_address}/topic/create?topic={topic}&partition_num={partitions}"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as r:
        assert r.status == 200


def receive(consumer: Consumer, count: int) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + TIMEOUT
    while len(out) < count:
        message = consumer.receive(timeout=max(0.0, deadline - time.monotonic()))
        assert message is not None, f"got {len(out)} of {count} messages"
        out.append(message)
    return out


def test_blocking_producer_and_consumer_round_trip(nsqd: Daemon) -> None:
    create_topic(nsqd, "blocking", 2)
    with Producer(nsqd.tcp_address, http_address=nsqd.http_address) as producer:
        producer.publish("blocking", b"keyed", key="user-7")
        producer.mpublish("blocking", [b"m0", b"m1", b"m2"], partition=1)
        message_id, offset = producer.publish_traced("blocking", b"traced", 0xFEED, partition=0)
        producer.dpublish("blocking", b"deferred", 1500)
        published_at = time.monotonic()

    with Consumer(
        nsqd.tcp_address, "blocking", "ch", http_address=nsqd.http_address, max_in_flight=10
    ) as consumer:
        assert threading.current_thread() is threading.main_thread()
        first = receive(consumer, 5)
        bodies = {m.body: m for m in first}
        assert set(bodies) == {b"keyed", b"m0", b"m1", b"m2", b"traced"}
        assert bodies[b"keyed"].partition == partition_for_key("user-7", 2)
        assert {bodies[b].partition for b in (b"m0", b"m1", b"m2")} == {1}
        traced = bodies[b"traced"]
        assert (traced.id, traced.trace_id, traced.partition) == (message_id, 0xFEED, 0)
        assert offset == (1 if partition_for_key("user-7", 2) == 0 else 0)
        # requeue one at once: it comes back with attempts 2; touch another, then finish all
        again = bodies[b"m1"]
        again.requeue()
        assert again.has_responded
        bodies[b"m0"].touch()
        for body, message in bodies.items():
            if body != b"m1":
                message.finish()
        deferred, redelivered = sorted(receive(consumer, 2), key=lambda m: m.body)
        assert (redelivered.body, redelivered.attempts) == (b"m1", 2)
        assert deferred.body == b"deferred"
        assert time.monotonic() - published_at >= 1.0  # DPUB held it back
        redelivered.finish()
        deferred.finish()
        assert consumer.receive(timeout=0.3) is None  # everything answered, nothing left

    # finished messages stay finished: a new consumer of the channel gets nothing
    with Consumer(nsqd.tcp_address, "blocking", "ch", http_address=nsqd.http_address) as again:
        assert again.receive(timeout=0.5) is None


def test_blocking_consumer_iterates_until_closed_and_raises_subscription_errors(
    nsqd: Daemon,
) -> None:
    with Producer(nsqd.tcp_address) as producer:
        producer.mpublish("iterate", [f"n{i}".encode() for i in range(20)])
    got: list[bytes] = []
    consumer = Consumer(nsqd.tcp_address, "iterate", "ch")
    closer = threading.Timer(5.0, consumer.close)  # a safety net if iteration never ends
    closer.start()
    try:
        for message in consumer:
            got.append(message.body)
            message.finish()
            if len(got) == 20:
                consumer.close()  # iteration then ends
    finally:
        closer.cancel()
        consumer.close()
    assert sorted(got) == sorted(f"n{i}".encode() for i in range(20))
    assert list(consumer) == []

    with pytest.raises(NsqError) as refused:
        Consumer(nsqd.tcp_address, "bad*topic", "ch")
    assert refused.value.code == "E_BAD_TOPIC"


def test_importing_the_blocking_client_does_not_import_trio() -> None:
    code = (
        "import sys\n"
        "from pnsq.client.blocking import Producer\n"
        "assert 'trio' not in sys.modules\n"
        "from pnsq.client.blocking import Consumer\n"
        "print('trio' in sys.modules, Producer.__name__, Consumer.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert out.split() == ["True", "BlockingClient", "pnsq.client.blocking_consumer"]


def test_a_writer_run_again_under_its_name_stores_nothing_twice(nsqd: Daemon) -> None:
    """What a Spark task re-run does: a second producer under the same name sends the same
    messages in the same order; the leader answers DUPLICATE and stores none of them again,
    and what the first run did not send is stored once."""
    create_topic(nsqd, "rerun", 2)
    bodies = [b"row-%d" % i for i in range(10)]
    keys = [f"k{i % 3}" for i in range(10)]
    with Producer(nsqd.tcp_address, nsqd.http_address, producer_name="job-7/part-0") as first:
        first.mpublish("rerun", bodies[:6], keys=keys[:6])  # the task dies after these
        assert first.stats["duplicates"] == 0
    with Producer(nsqd.tcp_address, nsqd.http_address, producer_name="job-7/part-0") as again:
        again.mpublish("rerun", bodies, keys=keys)  # re-run from the start
        assert again.stats["duplicates"] == 6  # the first six, in their batches per partition
    with Producer(nsqd.tcp_address, nsqd.http_address, idempotent=False) as plain:
        plain.publish("rerun", b"plain", partition=0)  # unnumbered: as any NSQ client
    stored = []
    with Producer(http_address=nsqd.http_address) as reader:
        for partition in range(2):
            stored += [r.body for r in reader.read_range("rerun", partition, 0, 100).records]
    assert sorted(stored) == sorted([*bodies, b"plain"])


def test_a_first_try_answered_duplicate_is_said_once(
    nsqd: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    """Two producers of one name (or a re-run sending other messages): the second one's
    numbers are stored already, its messages are answered DUPLICATE and not stored. Both
    producers (blocking and Trio) say so, once per partition, naming the producer."""
    create_topic(nsqd, "twins", 1)
    with Producer(nsqd.tcp_address, http_address=nsqd.http_address, producer_name="twin") as a:
        for n in range(3):
            a.publish("twins", b"a%d" % n, partition=0)
    with (
        caplog.at_level("WARNING", logger="pnsq.client"),
        Producer(nsqd.tcp_address, http_address=nsqd.http_address, producer_name="twin") as b,
    ):
        for n in range(2):
            b.publish("twins", b"b%d" % n, partition=0)
    assert b.stats["duplicates"] == 2
    said = [r.getMessage() for r in caplog.records if "answered DUPLICATE" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("twins/0: the first try of numbers 0.. of producer 'twin'")
    caplog.clear()

    async def trio_twin() -> None:
        async with open_producer(
            nsqd.tcp_address, http_address=nsqd.http_address, producer_name="twin"
        ) as c:
            for n in range(2):
                await c.publish("twins", b"c%d" % n, partition=0)

    with caplog.at_level("WARNING", logger="pnsq.client"):
        trio.run(trio_twin)
    said = [r.getMessage() for r in caplog.records if "answered DUPLICATE" in r.getMessage()]
    assert len(said) == 1
