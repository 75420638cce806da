"""The publish reactor: connections that send single PUBs are served from one task, each turn's
PUBs of all of them share one append, and everything else goes back to the connection's own
task with replies in command order (a real listener on loopback, raw protocol V2 clients)."""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nsqd.broker import BodyBatch, Broker, BrokerConfig, open_broker, read_records
from nsqd.broker.copying import follower_acked
from nsqd.broker.partition import Partition
from nsqd.core.partition_state import Placement, Role
from nsqd.tcp.reactor import APPEND_PART, PublishReactor, parts
from nsqd.tcp.reactor_contract import Taken
from nsqd.tcp.server import TCPServer
from nsqd.tcp.settings import SessionSettings
from pnsq._netio.tcp import serve_tcp

_HEADER = struct.Struct(">Ii")  # frame size (type + data), frame type
RESPONSE, ERROR, MESSAGE = 0, 1, 2
BODY_AT = 26  # a message frame's data: [i64 timestamp][u16 attempts][16 B id][body]


def pub(topic: str, body: bytes) -> bytes:
    return b"PUB %s\n" % topic.encode() + struct.pack(">I", len(body)) + body


def numbered(topic: str, sequence: int, body: bytes) -> bytes:
    """pnsq's numbered PUB to partition 0."""
    return b"PUB %s 0 %d\n" % (topic.encode(), sequence) + struct.pack(">I", len(body)) + body


def numbered_mpub(topic: str, sequence: int, *bodies: bytes) -> bytes:
    """pnsq's numbered MPUB to partition 0 (its first message numbered ``sequence``)."""
    parts = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    head = b"MPUB %s 0 %d\n" % (topic.encode(), sequence)
    return head + struct.pack(">II", len(parts) + 4, len(bodies)) + parts


def identify_producer(name: str) -> bytes:
    body = json.dumps({"pnsq_producer": name}).encode()
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


def mpub(topic: str, *bodies: bytes) -> bytes:
    parts = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    return b"MPUB %s\n" % topic.encode() + struct.pack(">II", len(parts) + 4, len(bodies)) + parts


class Client:
    """A raw V2 connection: send bytes, read frames."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buf = b""

    async def frame(self) -> tuple[int, bytes]:
        while True:
            if len(self._buf) >= 8:
                size, kind = _HEADER.unpack_from(self._buf)
                if len(self._buf) >= 4 + size:
                    data = self._buf[8 : 4 + size]
                    self._buf = self._buf[4 + size :]
                    return kind, data
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise EOFError("closed by the server")
            self._buf += chunk

    async def pub(self, topic: str, body: bytes) -> tuple[int, bytes]:
        return await self.pub_raw(pub(topic, body))

    async def pub_raw(self, command: bytes) -> tuple[int, bytes]:
        await self.stream.send_all(command)
        return await self.frame()


@asynccontextmanager
async def listening(
    tmp_path: Path, settings: SessionSettings | None = None, **config: int
) -> AsyncIterator[tuple[Broker, TCPServer, int]]:
    config_ = BrokerConfig(data_path=tmp_path, **config)
    async with open_broker(config_) as broker, trio.open_nursery() as nursery:
        server = TCPServer(broker, settings or SessionSettings())
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        yield broker, server, port
        nursery.cancel_scope.cancel()


async def connect(port: int) -> Client:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"  V2")
    return Client(stream)


async def subscribe(port: int, topic: str, channel: str, rdy: int) -> Client:
    client = await connect(port)
    await client.stream.send_all(b"SUB %s %s\n" % (topic.encode(), channel.encode()))
    assert await client.frame() == (RESPONSE, b"OK")
    await client.stream.send_all(b"RDY %d\n" % rdy)
    return client


async def stored(broker: Broker, topic: str) -> list[bytes]:
    return [r.body for r in await read_records(broker.topics[topic].partitions[0], 0, 10_000)]


async def test_synchronous_publishers_share_the_reactors_appends(tmp_path: Path) -> None:
    clients, rounds = 8, 20
    async with listening(tmp_path) as (broker, server, port):
        replies: list[tuple[int, bytes]] = []

        async def publisher(n: int) -> None:
            client = await connect(port)
            for i in range(rounds):
                replies.append(await client.pub("t", b"%d.%d" % (n, i)))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for n in range(clients):
                    nursery.start_soon(publisher, n)
        assert replies == [(RESPONSE, b"OK")] * (clients * rounds)
        reactor = server.reactor
        # a connection's first PUB takes the task path (and a next one may too, when it is
        # there to read right after the reply went out); most are the reactor's
        assert clients * rounds // 2 < reactor.publishes <= clients * (rounds - 1)
        assert reactor.appends <= reactor.turns < reactor.publishes  # turns served several
        bodies = await stored(broker, "t")
        assert len(bodies) == clients * rounds
        for n in range(clients):  # each connection's PUBs in the order it sent them
            mine = [b for b in bodies if b.startswith(b"%d." % n)]
            assert mine == [b"%d.%d" % (n, i) for i in range(rounds)]


async def test_producers_numbered_pubs_share_the_reactors_appends_and_retries_are_judged_alone(
    tmp_path: Path,
) -> None:
    clients, rounds = 6, 15
    async with listening(tmp_path) as (broker, server, port):
        producers = []
        for n in range(clients):
            client = await connect(port)
            await client.stream.send_all(identify_producer(f"p{n}"))
            assert (await client.frame())[0] == RESPONSE
            producers.append(client)

        async def publisher(n: int) -> None:
            for i in range(rounds):
                reply = await producers[n].pub_raw(numbered("t", i, b"%d.%d" % (n, i)))
                assert reply == (RESPONSE, b"OK")

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for n in range(clients):
                    nursery.start_soon(publisher, n)
            reactor = server.reactor
            assert clients * rounds // 2 < reactor.publishes  # most were the reactor's
            assert reactor.appends < reactor.publishes  # producers' PUBs shared appends
            await trio.testing.wait_all_tasks_blocked()  # parked again
            first = producers[0]
            # a retry of a stored number (its OK lost), a gap, then the next number: the
            # reactor gives the first two back to the connection's task, which judges them
            await first.stream.send_all(numbered("t", rounds - 1, b"again"))
            assert await first.frame() == (RESPONSE, b"DUPLICATE 1")
            await trio.testing.wait_all_tasks_blocked()
            await first.stream.send_all(numbered("t", rounds + 5, b"gap"))
            kind, data = await first.frame()
            assert kind == ERROR
            assert data.startswith(b"E_PUB_SEQUENCE_GAP"), data
            assert await first.pub_raw(numbered("t", rounds, b"next")) == (RESPONSE, b"OK")
        bodies = await stored(broker, "t")
        assert len(bodies) == clients * rounds + 1
        for n in range(clients):  # each producer's PUBs once, in order
            mine = [b for b in bodies if b.startswith(b"%d." % n)]
            assert mine == [b"%d.%d" % (n, i) for i in range(rounds)]
        assert bodies[-1] == b"next"


@pytest.mark.parametrize("kind", ["plain", "numbered"])
async def test_a_pipelining_publisher_is_served_by_the_reactor_after_its_first_pubs(
    tmp_path: Path, kind: str
) -> None:
    # the next PUBs are always there to read when the replies went out: the connection's task
    # must still park in the reactor rather than go on reading them itself
    chunks, size = 30, 20

    def chunk(k: int) -> bytes:
        if kind == "plain":
            return b"".join(pub("t", b"%d" % (k * size + i)) for i in range(size))
        return b"".join(numbered("t", k * size + i, b"%d" % (k * size + i)) for i in range(size))

    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        if kind == "numbered":
            await client.stream.send_all(identify_producer("p"))
            assert (await client.frame())[0] == RESPONSE
        with trio.fail_after(20):
            await client.stream.send_all(chunk(0))
            for k in range(1, chunks + 1):
                if k < chunks:
                    await client.stream.send_all(chunk(k))  # before the replies of the last
                for _ in range(size):
                    assert await client.frame() == (RESPONSE, b"OK")
        assert server.reactor.publishes >= (chunks - 2) * size
        bodies = await stored(broker, "t")
        assert bodies == [b"%d" % i for i in range(chunks * size)]


async def test_other_commands_go_back_to_the_connections_task_in_order(tmp_path: Path) -> None:
    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        with trio.fail_after(10):
            assert await client.pub("t", b"first") == (RESPONSE, b"OK")  # now in the reactor
            await trio.testing.wait_all_tasks_blocked()
            await client.stream.send_all(pub("t", b"a") + pub("t", b"b"))
            assert [await client.frame() for _ in range(2)] == [(RESPONSE, b"OK")] * 2
            assert server.reactor.publishes == 2  # appended together by the reactor
            await trio.testing.wait_all_tasks_blocked()
            # the PUB before the MPUB is gathered by the reactor, appended by the task
            await client.stream.send_all(
                pub("t", b"b2")
                + mpub("t", b"m1", b"m2")
                + b"NOP\n"
                + pub("u", b"other topic")
                + pub("t", b"c")
                + b"BOGUS\n"
            )
            replies = [await client.frame() for _ in range(5)]  # NOP has no reply
            assert await client.stream.receive_some(100) == b""  # the bad command is fatal
        assert replies[:4] == [(RESPONSE, b"OK")] * 4
        assert replies[4][0] == ERROR
        assert replies[4][1].startswith(b"E_INVALID")
        assert await stored(broker, "t") == [b"first", b"a", b"b", b"b2", b"m1", b"m2", b"c"]
        assert await stored(broker, "u") == [b"other topic"]


async def test_publishers_that_must_wait_for_fsync_stay_on_their_task(tmp_path: Path) -> None:
    async with listening(tmp_path, sync_every=1) as (broker, server, port):
        client = await connect(port)
        with trio.fail_after(10):
            for i in range(5):
                assert await client.pub("t", b"%d" % i) == (RESPONSE, b"OK")
        assert server.reactor.publishes == 0  # every ack waited for its fsync instead
        assert server.reactor.handovers <= 1  # declined once, then its task kept it
        assert len(await stored(broker, "t")) == 5
        assert broker.publish_acks.without_fsync("t") is False


async def test_a_failed_append_answers_each_of_its_publishers(tmp_path: Path) -> None:
    async with listening(tmp_path) as (broker, server, port):
        clients = [await connect(port) for _ in range(3)]
        with trio.fail_after(10):
            for client in clients:
                assert await client.pub("t", b"x") == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()  # all three parked in the reactor
            broker.topics["t"].partitions[0].log.close()  # appending to it now fails
            for client in clients:
                await client.stream.send_all(pub("t", b"y") + pub("t", b"z"))
            for client in clients:
                kind, data = await client.frame()
                assert kind == ERROR
                assert data.startswith(b"E_PUB_FAILED"), data
        assert server.reactor.publishes == 0


async def test_eof_and_cancellation_release_parked_connections(tmp_path: Path) -> None:
    async with listening(tmp_path) as (_, server, port):
        leaving, staying = await connect(port), await connect(port)
        with trio.fail_after(10):
            assert await leaving.pub("t", b"1") == (RESPONSE, b"OK")
            assert await staying.pub("t", b"2") == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()
            await leaving.stream.aclose()
            while len(server.sessions) > 1:  # its session ended on the reactor's EOF
                await trio.sleep(0.01)
    # leaving the block cancelled the listener while `staying` was parked: no hang


def follow(broker: Broker, topic: str = "t") -> Partition:
    """lookupd placed a follower (b:1) in sync with partition 0 of ``topic``, led here."""
    partition = broker.topics[topic].partitions[0]
    partition.state.apply(Placement(Role.LEADER, 2, "a:1", ("b:1",), ("a:1", "b:1")))
    broker.replication.wake(partition)
    return partition


async def unanswered(client: Client, seconds: float = 0.2) -> bool:
    """No frame reaches ``client`` for ``seconds``."""
    with trio.move_on_after(seconds) as waited:
        await client.frame()
    return waited.cancelled_caught


def follower_holds(broker: Broker, partition: Partition) -> None:
    """The follower acknowledges everything the partition's log holds."""
    topic = broker.topics["t"]
    follower_acked(broker, topic, partition, "b:1", partition.log.end_offset)


async def held_pub(broker: Broker, reactor: PublishReactor, client: Client) -> Partition:
    """``client`` publishes once to t (acknowledged at once: it parks in the reactor), then
    lookupd puts a follower in sync and ``client`` publishes again: the reactor appends that
    PUB and holds its OK. The partition."""
    assert await client.pub("t", b"alone") == (RESPONSE, b"OK")
    await trio.testing.wait_all_tasks_blocked()
    partition = follow(broker)
    await client.stream.send_all(pub("t", b"held"))
    while partition.log.end_offset < 2:
        await trio.sleep(0.005)
    assert reactor.holds == 1
    return partition


async def test_pubs_with_an_in_sync_follower_are_held_until_it_acknowledges(
    tmp_path: Path,
) -> None:
    """The reactor appends PUBs to a partition with an in-sync follower as any other, holds
    their OKs until the follower holds the records (one acknowledgement releases the turn's
    publishers) and keeps serving the connections: no task per publisher, no hand-over."""
    async with listening(tmp_path) as (broker, server, port):
        clients = [await connect(port) for _ in range(3)]
        with trio.fail_after(10):
            for client in clients:
                assert await client.pub("t", b"alone") == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()  # parked in the reactor
        partition = follow(broker)
        reactor = server.reactor
        handovers = reactor.handovers
        for rnd in range(3):
            for client in clients:
                await client.stream.send_all(pub("t", b"replicated %d" % rnd))
            while partition.log.end_offset < 3 + 3 * (rnd + 1):  # appended by the reactor
                await trio.sleep(0.005)
            assert await unanswered(clients[0])  # no OK: the follower does not hold them yet
            follower_holds(broker, partition)
            with trio.fail_after(10):
                for client in clients:
                    assert await client.frame() == (RESPONSE, b"OK")
        assert reactor.handovers == handovers  # every one stayed in the reactor
        assert reactor.holds >= 3
        assert reactor.publishes >= 9
        bodies = await stored(broker, "t")
        assert sorted(bodies[3:]) == sorted(
            b"replicated %d" % r for r in range(3) for _ in range(3)
        )


async def test_numbered_pubs_with_an_in_sync_follower_are_held_and_retries_judged_alone(
    tmp_path: Path,
) -> None:
    """A producer's numbered PUBs to a replicated partition share the reactor's appends and
    wait for the follower like plain ones; a retry of a number stored but not yet held by the
    follower goes to the connection's task, which answers DUPLICATE once the follower has it."""
    async with listening(tmp_path) as (broker, server, port):
        producers = []
        for n in range(2):
            client = await connect(port)
            await client.stream.send_all(identify_producer(f"p{n}"))
            assert (await client.frame())[0] == RESPONSE
            assert await client.pub_raw(numbered("t", 0, b"%d.0" % n)) == (RESPONSE, b"OK")
            producers.append(client)
        await trio.testing.wait_all_tasks_blocked()  # parked in the reactor
        partition = follow(broker)
        with trio.fail_after(10):
            for n, client in enumerate(producers):
                await client.stream.send_all(numbered("t", 1, b"%d.1" % n))
            while partition.log.end_offset < 4:
                await trio.sleep(0.005)
            assert server.reactor.holds >= 1
            assert await unanswered(producers[0])  # held for the follower
            follower_holds(broker, partition)
            for client in producers:
                assert await client.frame() == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()
            retry = producers[0]
            await retry.stream.send_all(numbered("t", 2, b"0.2"))
            while partition.log.end_offset < 5:
                await trio.sleep(0.005)
            await retry.stream.send_all(numbered("t", 2, b"0.2"))  # its OK "lost": sent again
            assert await unanswered(retry)
            follower_holds(broker, partition)
            assert await retry.frame() == (RESPONSE, b"OK")
            assert await retry.frame() == (RESPONSE, b"DUPLICATE 1")
        assert await stored(broker, "t") == [b"0.0", b"1.0", b"0.1", b"1.1", b"0.2"]


async def test_what_a_held_publisher_sends_meanwhile_waits_and_is_answered_in_order(
    tmp_path: Path,
) -> None:
    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        with trio.fail_after(10):
            assert await client.pub("u", b"unreplicated") == (RESPONSE, b"OK")
            partition = await held_pub(broker, server.reactor, client)
            await client.stream.send_all(pub("u", b"meanwhile"))  # acked at once, once read
            assert await unanswered(client, 0.3)  # nothing answered before the held PUB
            assert len(await stored(broker, "u")) == 1  # not even read
            follower_holds(broker, partition)
            assert await client.frame() == (RESPONSE, b"OK")  # the held PUB
            assert await client.frame() == (RESPONSE, b"OK")  # then "meanwhile"
        assert await stored(broker, "u") == [b"unreplicated", b"meanwhile"]
        assert server.reactor.holds == 1


async def test_a_held_pub_whose_leadership_moves_gets_not_leader_and_the_connection_goes_on(
    tmp_path: Path,
) -> None:
    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        with trio.fail_after(10):
            partition = await held_pub(broker, server.reactor, client)
            # lookupd moved the leadership to b:1 before it acknowledged
            partition.state.apply(Placement(Role.REPLICA, 3, "b:1", ("a:1",), ("b:1", "a:1")))
            broker.replication.wake(partition)
            kind, data = await client.frame()
            assert kind == ERROR
            assert data.startswith(b"E_FAILED_ON_NOT_LEADER"), data
            await client.stream.send_all(b"NOP\n" + pub("other", b"still served"))
            assert await client.frame() == (RESPONSE, b"OK")


async def test_a_publisher_handed_back_while_held_gets_its_ok_from_its_own_task(
    tmp_path: Path,
) -> None:
    """The reactor stops (the daemon is stopping) while a publisher's OKs wait for the
    follower: its own task waits for them, and answers in order."""
    config = BrokerConfig(data_path=tmp_path)
    async with open_broker(config) as broker, trio.open_nursery() as nursery:
        server = TCPServer(broker, SessionSettings())
        reactor_scope = trio.CancelScope()

        async def run_reactor() -> None:
            with reactor_scope:
                await server.reactor.run()

        nursery.start_soon(run_reactor)
        serve = partial(serve_tcp, server._handle, "127.0.0.1", 0, log=logging.getLogger("test"))
        port = await nursery.start(serve)
        client = await connect(port)
        with trio.fail_after(10):
            partition = await held_pub(broker, server.reactor, client)
            reactor_scope.cancel()  # the reactor stops: the publisher goes back to its task
            await trio.testing.wait_all_tasks_blocked()
            await client.stream.send_all(pub("other", b"after"))
            assert await unanswered(client)  # the held OK comes first, once replicated
            follower_holds(broker, partition)
            assert await client.frame() == (RESPONSE, b"OK")  # the held PUB
            assert await client.frame() == (RESPONSE, b"OK")  # then "other"
        nursery.cancel_scope.cancel()


async def test_a_parked_publisher_answers_heartbeats_and_stays(tmp_path: Path) -> None:
    """Heartbeats reach a connection parked in the reactor; its NOPs count as reads (no
    "no command for 2 intervals" close) and it goes back to the reactor after each."""
    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        body = b'{"heartbeat_interval": 1000}'
        with trio.fail_after(15):
            await client.stream.send_all(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
            assert await client.frame() == (RESPONSE, b"OK")
            assert await client.pub("t", b"before") == (RESPONSE, b"OK")
            beats = 0
            with trio.move_on_after(2.6):  # past two intervals without a PUB
                while True:
                    assert await client.frame() == (RESPONSE, b"_heartbeat_")
                    beats += 1
                    await client.stream.send_all(b"NOP\n")
            assert beats >= 2
            assert await client.pub("t", b"after") == (RESPONSE, b"OK")
        assert await stored(broker, "t") == [b"before", b"after"]
        assert server.reactor.handovers >= beats  # each NOP went back to the task


async def test_new_topics_and_several_targets_go_back_only_once(tmp_path: Path) -> None:
    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        with trio.fail_after(10):
            assert await client.pub("a", b"1") == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()
            assert await client.pub("b", b"1") == (RESPONSE, b"OK")  # created by its task
            await trio.testing.wait_all_tasks_blocked()
            await client.stream.send_all(pub("a", b"2") + pub("b", b"2"))  # two targets
            assert [await client.frame() for _ in range(2)] == [(RESPONSE, b"OK")] * 2
            await trio.testing.wait_all_tasks_blocked()
            before = server.reactor.publishes
            assert await client.pub("a", b"3") == (RESPONSE, b"OK")
            assert server.reactor.publishes == before + 1  # parked in the reactor again
        assert await stored(broker, "a") == [b"1", b"2", b"3"]
        assert await stored(broker, "b") == [b"1", b"2"]


async def test_an_idle_consumer_gets_the_turns_messages_before_the_publishers_ok(
    tmp_path: Path,
) -> None:
    async with listening(tmp_path) as (_, server, port):
        consumer = await subscribe(port, "t", "c", 10)
        publisher = await connect(port)
        with trio.fail_after(10):
            assert await publisher.pub("t", b"first") == (RESPONSE, b"OK")  # by its task
            kind, data = await consumer.frame()
            assert (kind, data[BODY_AT:]) == (MESSAGE, b"first")
            await trio.testing.wait_all_tasks_blocked()  # parked; the consumer's pump idle
            assert server.reactor.deliveries == 0
            await publisher.stream.send_all(pub("t", b"second") + pub("t", b"third"))
            assert [await publisher.frame() for _ in range(2)] == [(RESPONSE, b"OK")] * 2
            # written by the reactor's turn before the OKs: in the consumer's socket already,
            # though its pump's task may not have run yet
            waiting = os.read(consumer.stream.socket.fileno(), 65536)
            consumer._buf = waiting
            frames = [await consumer.frame() for _ in range(2)]
        assert [(kind, data[BODY_AT:]) for kind, data in frames] == [
            (MESSAGE, b"second"),
            (MESSAGE, b"third"),
        ]
        assert server.reactor.deliveries == 1  # one delivery carried the turn's two messages


async def test_a_consumer_without_rdy_room_is_left_to_its_pump(tmp_path: Path) -> None:
    async with listening(tmp_path) as (_, server, port):
        consumer = await subscribe(port, "t", "c", 1)
        publisher = await connect(port)
        with trio.fail_after(10):
            assert await publisher.pub("t", b"first") == (RESPONSE, b"OK")
            kind, first = await consumer.frame()
            await trio.testing.wait_all_tasks_blocked()
            assert await publisher.pub("t", b"second") == (RESPONSE, b"OK")  # RDY 1 is used
            await trio.testing.wait_all_tasks_blocked()
            assert server.reactor.deliveries == 0
            await consumer.stream.send_all(b"FIN " + first[10:BODY_AT] + b"\n")
            kind, second = await consumer.frame()  # the pump, once the FIN freed RDY room
        assert (kind, second[BODY_AT:]) == (MESSAGE, b"second")


async def test_a_failed_delivery_from_a_turn_ends_the_consumer_not_the_publisher(
    tmp_path: Path,
) -> None:
    async with listening(tmp_path) as (broker, server, port):
        consumer = await subscribe(port, "t", "c", 10)
        publisher = await connect(port)
        with trio.fail_after(10):
            assert await publisher.pub("t", b"first") == (RESPONSE, b"OK")
            assert (await consumer.frame())[0] == MESSAGE
            await trio.testing.wait_all_tasks_blocked()
            channel = broker.topics["t"].channels["c"]

            def broken_take(*args: object, **kwargs: object) -> object:
                raise RuntimeError("the read failed")

            channel.take = broken_take  # type: ignore[method-assign]
            assert await publisher.pub("t", b"second") == (RESPONSE, b"OK")
            assert server.reactor.deliveries == 1
            with pytest.raises(EOFError):  # its pump raised the error
                await consumer.frame()
            assert await publisher.pub("t", b"third") == (RESPONSE, b"OK")  # still served
        assert await stored(broker, "t") == [b"first", b"second", b"third"]


class _TaskSteps(trio.abc.Instrument):
    """Counts the steps of the tasks whose name ends with ``suffix``."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith(self.suffix):
            self.steps += 1


async def test_a_turns_delivery_of_everything_leaves_the_pump_asleep(tmp_path: Path) -> None:
    async with listening(tmp_path) as (_, server, port):
        consumer = await subscribe(port, "t", "c", 10)
        publisher = await connect(port)
        pump = _TaskSteps("._pump")
        with trio.fail_after(10):
            assert await publisher.pub("t", b"first") == (RESPONSE, b"OK")
            assert (await consumer.frame())[0] == MESSAGE
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.add_instrument(pump)
            try:
                assert await publisher.pub("t", b"second") == (RESPONSE, b"OK")
                kind, data = await consumer.frame()
                await trio.testing.wait_all_tasks_blocked()
            finally:
                trio.lowlevel.remove_instrument(pump)
        assert (kind, data[BODY_AT:]) == (MESSAGE, b"second")
        assert server.reactor.deliveries == 1
        assert pump.steps == 0  # nothing was left for it: not woken only to park again


async def test_what_a_turns_delivery_leaves_goes_with_the_pump(tmp_path: Path) -> None:
    # room for one 100-byte frame at a time: a delivery takes one message
    settings = SessionSettings(max_pending_output_bytes=100)
    async with listening(tmp_path, settings) as (_, server, port):
        consumer = await subscribe(port, "t", "c", 10)
        publisher = await connect(port)
        with trio.fail_after(10):
            assert await publisher.pub("t", b"a" * 100) == (RESPONSE, b"OK")
            assert (await consumer.frame())[0] == MESSAGE
            await trio.testing.wait_all_tasks_blocked()
            await publisher.stream.send_all(pub("t", b"b" * 100) + pub("t", b"c" * 100))
            assert [await publisher.frame() for _ in range(2)] == [(RESPONSE, b"OK")] * 2
            frames = [await consumer.frame() for _ in range(2)]  # no FIN: the pump's send
        assert [data[BODY_AT:] for _, data in frames] == [b"b" * 100, b"c" * 100]
        assert server.reactor.deliveries == 1


@pytest.mark.parametrize("busy_poll", [0.2, 0.0])
async def test_a_turn_close_to_the_last_one_is_followed_by_busy_poll(
    tmp_path: Path, busy_poll: float
) -> None:
    async with listening(tmp_path, SessionSettings(busy_poll=busy_poll)) as (broker, server, port):
        publisher = await connect(port)
        reactor = server.reactor
        with trio.fail_after(20):
            assert await publisher.pub("t", b"1") == (RESPONSE, b"OK")  # by its task
            await trio.testing.wait_all_tasks_blocked()  # parked: the reactor serves it now
            assert await publisher.pub("t", b"2") == (RESPONSE, b"OK")  # the first turn
            await trio.testing.wait_all_tasks_blocked()  # no turn before it: asleep at once
            asleep = reactor.sleeps
            assert await publisher.pub("t", b"3") == (RESPONSE, b"OK")  # close to the last
            await trio.sleep(0.01)
            # polling on for busy_poll (or, without it, asleep again at once)
            assert reactor.sleeps == (asleep if busy_poll else asleep + 1)
            await trio.sleep(2 * busy_poll)
            await trio.testing.wait_all_tasks_blocked()
            assert reactor.sleeps == asleep + 1  # the poll ended
        assert reactor.turns == 2
        assert await stored(broker, "t") == [b"1", b"2", b"3"]


async def test_mpub_publishers_are_served_by_the_reactor(tmp_path: Path) -> None:
    """Stock MPUBs park their connection in the reactor as PUBs do: one OK per MPUB, each
    MPUB's messages stored together and in the order sent."""
    clients, rounds = 3, 15
    async with listening(tmp_path) as (broker, server, port):

        async def publisher(n: int) -> None:
            client = await connect(port)
            for i in range(rounds):
                bodies = [b"%d.%d.%d" % (n, i, k) for k in range(3)]
                assert await client.pub_raw(mpub("t", *bodies)) == (RESPONSE, b"OK")

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for n in range(clients):
                    nursery.start_soon(publisher, n)
        reactor = server.reactor
        # each connection's first MPUB takes the task path; the rest are the reactor's
        assert clients * rounds // 2 < reactor.publishes <= clients * (rounds - 1)
        bodies = await stored(broker, "t")
        assert len(bodies) == clients * rounds * 3
        for n in range(clients):
            mine = [b for b in bodies if b.startswith(b"%d." % n)]
            assert mine == [b"%d.%d.%d" % (n, i, k) for i in range(rounds) for k in range(3)]
        for at in range(0, len(bodies), 3):  # no MPUB split by another's messages
            assert len({b.rsplit(b".", 1)[0] for b in bodies[at : at + 3]}) == 1


async def test_mpubs_with_an_in_sync_follower_are_held_until_it_acknowledges(
    tmp_path: Path,
) -> None:
    async with listening(tmp_path) as (broker, server, port):
        client = await connect(port)
        with trio.fail_after(10):
            assert await client.pub_raw(mpub("t", b"a", b"b")) == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()  # parked in the reactor
        partition = follow(broker)
        reactor = server.reactor
        handovers = reactor.handovers
        for rnd in range(3):
            await client.stream.send_all(mpub("t", b"%d.1" % rnd, b"%d.2" % rnd))
            while partition.log.end_offset < 2 + 2 * (rnd + 1):  # appended by the reactor
                await trio.sleep(0.005)
            assert await unanswered(client)  # no OK: the follower does not hold them yet
            follower_holds(broker, partition)
            with trio.fail_after(10):
                assert await client.frame() == (RESPONSE, b"OK")
        assert reactor.handovers == handovers
        assert reactor.holds == 3
        assert reactor.publishes == 3
        assert await stored(broker, "t") == [b"a", b"b"] + [
            b"%d.%d" % (r, k) for r in range(3) for k in (1, 2)
        ]


def test_a_turns_publishes_to_one_target_are_cut_into_parts_of_whole_publishers() -> None:
    """Single PUBs of many publishers stay one append; MPUBs go one by one; a part closes
    once it holds APPEND_PART messages, each publisher's whole, the order kept."""

    def shares(*sizes: int) -> list[tuple[int, Any, Taken]]:
        return [
            (fd, None, Taken("t", None, BodyBatch(0, [b"m"] * size), None, 1, "MPUB"))
            for fd, size in enumerate(sizes)
        ]

    def cut(*sizes: int) -> list[list[int]]:
        return [[fd for fd, _, _ in part] for part in parts(shares(*sizes))]

    assert cut(*[1] * 16) == [list(range(16))]
    assert cut(200, 200) == [[0], [1]]
    assert cut(APPEND_PART - 1, 1, 1) == [[0, 1], [2]]
    assert cut(30, 40, 1, 100, 5) == [[0, 1], [2, 3], [4]]
    assert cut() == []


async def test_a_turns_mpubs_are_appended_one_by_one_and_each_released_by_its_own_ack(
    tmp_path: Path,
) -> None:
    """Two publishers' MPUBs read in one turn, to a partition with an in-sync follower, are
    two appends: the follower's acknowledgement of the first releases its publisher while the
    second still waits (joined, both waited for the whole turn)."""
    size = APPEND_PART + 10
    async with listening(tmp_path) as (broker, server, port):
        clients = [await connect(port) for _ in range(2)]
        with trio.fail_after(10):
            for n, client in enumerate(clients):
                assert await client.pub_raw(mpub("t", b"%d first" % n)) == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()  # parked in the reactor
        partition = follow(broker)
        reactor = server.reactor
        for _ in range(5):  # the loopback delivers both before the reactor polls, or try again
            turns, appends, base = reactor.turns, reactor.appends, partition.log.end_offset
            for n, client in enumerate(clients):  # no checkpoint between: one turn reads both
                command = mpub("t", *(b"%d.%d" % (n, i) for i in range(size)))
                assert os.write(client.stream.socket.fileno(), command) == len(command)
            with trio.fail_after(10):
                while partition.log.end_offset < base + 2 * size:
                    await trio.sleep(0.005)
            if reactor.turns == turns + 1:
                break
            follower_holds(broker, partition)  # read in two turns: release both, again
            with trio.fail_after(10):
                for client in clients:
                    assert await client.frame() == (RESPONSE, b"OK")
        else:
            pytest.fail("the two MPUBs were never read in one turn")
        assert reactor.appends == appends + 2
        bodies = await stored(broker, "t")
        first = int(bodies[base].split(b".")[0])  # whose MPUB the turn read first
        assert bodies[base : base + size] == [b"%d.%d" % (first, i) for i in range(size)]
        follower_acked(broker, broker.topics["t"], partition, "b:1", base + size)
        with trio.fail_after(10):
            assert await clients[first].frame() == (RESPONSE, b"OK")
        assert await unanswered(clients[1 - first])  # its records are not held yet
        follower_holds(broker, partition)
        with trio.fail_after(10):
            assert await clients[1 - first].frame() == (RESPONSE, b"OK")


async def test_refused_mpubs_and_pubs_get_one_error_each_in_order(tmp_path: Path) -> None:
    """A refused append answers each publish once, in order, and the connection goes on:
    MPUBs and a PUB read together (two runs, appended by the task), and an MPUB the reactor
    took, whose refusal names MPUB."""
    async with listening(tmp_path) as (broker, _, port):
        mixed, alone = await connect(port), await connect(port)
        with trio.fail_after(10):
            for client in (mixed, alone):
                assert await client.pub_raw(mpub("t", b"x")) == (RESPONSE, b"OK")
            await trio.testing.wait_all_tasks_blocked()  # both parked in the reactor
            topic = broker.topics["t"]
            topic.min_isr = 2  # too few copies in sync: refused, not fatal
            await mixed.stream.send_all(mpub("t", b"1") + mpub("t", b"2") + pub("t", b"3"))
            replies = [await mixed.frame() for _ in range(3)]
            assert replies == [(ERROR, b"E_FAILED_ON_NOT_WRITABLE ")] * 3  # youzan's, text and all
            topic.min_isr = 1
            assert await mixed.pub_raw(mpub("t", b"4", b"5")) == (RESPONSE, b"OK")
            topic.partitions[0].log.close()  # appending to it now fails
            await alone.stream.send_all(mpub("t", b"y", b"z"))
            kind, data = await alone.frame()
        assert kind == ERROR
        assert data.startswith(b"E_MPUB_FAILED MPUB failed"), data


async def test_producers_numbered_mpubs_are_served_by_the_reactor_and_retries_judged_alone(
    tmp_path: Path,
) -> None:
    """A producer's numbered MPUBs park in the reactor as its numbered PUBs do (one OK each;
    two producers' MPUBs may share an append); a retry of stored numbers, whole or in part,
    goes to the connection's task, which answers ``DUPLICATE <n>`` and stores only the rest."""
    producers, rounds = 2, 10
    async with listening(tmp_path) as (broker, server, port):
        clients = []
        for n in range(producers):
            client = await connect(port)
            await client.stream.send_all(identify_producer(f"p{n}"))
            assert (await client.frame())[0] == RESPONSE
            clients.append(client)

        async def publisher(n: int) -> None:
            for i in range(rounds):
                command = numbered_mpub("t", 3 * i, *(b"%d.%d" % (n, 3 * i + k) for k in range(3)))
                assert await clients[n].pub_raw(command) == (RESPONSE, b"OK")

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for n in range(producers):
                    nursery.start_soon(publisher, n)
            reactor = server.reactor
            assert producers * rounds // 2 < reactor.publishes <= producers * (rounds - 1)
            await trio.testing.wait_all_tasks_blocked()  # parked again
            first = clients[0]
            end = 3 * rounds
            retry = numbered_mpub("t", end - 3, b"x", b"y", b"z")  # the last one, all stored
            assert await first.pub_raw(retry) == (RESPONSE, b"DUPLICATE 3")
            await trio.testing.wait_all_tasks_blocked()
            partly = numbered_mpub("t", end - 1, b"again", b"0.%d" % end)  # one stored, one new
            assert await first.pub_raw(partly) == (RESPONSE, b"DUPLICATE 1")
            await trio.testing.wait_all_tasks_blocked()
            after = numbered_mpub("t", end + 1, b"0.%d" % (end + 1))
            assert await first.pub_raw(after) == (RESPONSE, b"OK")
        bodies = await stored(broker, "t")
        for n in range(producers):  # each producer's messages once, in order
            mine = [b for b in bodies if b.startswith(b"%d." % n)]
            count = 3 * rounds + (2 if n == 0 else 0)
            assert mine == [b"%d.%d" % (n, i) for i in range(count)]
        assert len(bodies) == 3 * rounds * producers + 2
