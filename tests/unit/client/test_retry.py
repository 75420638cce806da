"""The producers' retry rules against a scripted fake nsqd on loopback (in-process): retryable
errors and lost connections are retried, other errors are not. Also: the blocking client does
not import Trio."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import pytest
import trio

from pnsq.client import NsqError, open_producer
from pnsq.client.blocking import BlockingClient
from protocol import NEED_DATA, CommandParser, Identify, Pub
from protocol.commands import Command
from protocol.frames import MAGIC_V2, encode_error, encode_response

CLOSE = None  # script step: drop the connection instead of answering


@dataclass
class FakeNsqd:
    """Answers IDENTIFY with OK and each publish with the next scripted reply."""

    script: list[bytes | str | None]
    commands: list[Command] = field(default_factory=list)
    connections: int = 0
    address: str = ""

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        parser = CommandParser()
        magic = b""
        async with stream:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                if len(magic) < len(MAGIC_V2):
                    need = len(MAGIC_V2) - len(magic)
                    magic, data = magic + data[:need], data[need:]
                parser.receive_data(data)
                while (command := parser.next_event()) is not NEED_DATA:
                    if isinstance(command, Identify):
                        await stream.send_all(encode_response(b"OK"))
                        continue
                    self.commands.append(command)
                    step = self.script.pop(0) if self.script else b"OK"
                    if step is CLOSE:
                        return
                    if isinstance(step, str):
                        await stream.send_all(encode_error(step))
                    else:
                        await stream.send_all(encode_response(step))


@asynccontextmanager
async def fake_nsqd(*script: bytes | str | None) -> AsyncIterator[FakeNsqd]:
    fake = FakeNsqd(list(script))
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, fake.handle, 0, host="127.0.0.1"))
        fake.address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        yield fake
        nursery.cancel_scope.cancel()


async def test_retryable_error_is_retried() -> None:
    with trio.fail_after(5):
        async with (
            fake_nsqd("E_FAILED_ON_NOT_LEADER ") as fake,
            open_producer(fake.address, retry_backoff=0.01) as producer,
        ):
            await producer.publish("t", b"x")
    assert fake.commands == [Pub("t", b"x"), Pub("t", b"x")]
    assert fake.connections == 1  # non-fatal: same connection


async def test_lost_connection_is_retried_on_a_new_one() -> None:
    with trio.fail_after(5):
        async with (
            fake_nsqd(CLOSE) as fake,
            open_producer(fake.address, retry_backoff=0.01) as producer,
        ):
            await producer.publish("t", b"x", partition=2)
    assert fake.commands == [Pub("t", b"x", 2), Pub("t", b"x", 2)]
    assert fake.connections == 2


async def test_other_errors_are_not_retried() -> None:
    with trio.fail_after(5):
        async with (
            fake_nsqd("E_BAD_MESSAGE too big") as fake,
            open_producer(fake.address, retry_backoff=0.01) as producer,
        ):
            with pytest.raises(NsqError) as info:
                await producer.publish("t", b"x")
    assert info.value.text == "E_BAD_MESSAGE too big"
    assert len(fake.commands) == 1


async def test_attempts_are_bounded() -> None:
    errors = ["E_TOPIC_NOT_EXIST "] * 5
    with trio.fail_after(5):
        async with (
            fake_nsqd(*errors) as fake,
            open_producer(fake.address, max_attempts=3, retry_backoff=0.01) as p,
        ):
            with pytest.raises(NsqError) as info:
                await p.mpublish("t", [b"a", b"b"])
    assert info.value.code == "E_TOPIC_NOT_EXIST"
    assert len(fake.commands) == 3


async def test_blocking_client_retries_the_same_way() -> None:
    def run(address: str) -> None:
        with BlockingClient(address, retry_backoff=0.01) as nsq:
            nsq.publish("t", b"x")
            with pytest.raises(NsqError):
                nsq.publish("t", b"y")

    with trio.fail_after(5):
        async with fake_nsqd(CLOSE, "E_FAILED_ON_NOT_LEADER ", b"OK", "E_BAD_BODY no") as fake:
            await trio.to_thread.run_sync(run, fake.address)
    assert [c.body for c in fake.commands if isinstance(c, Pub)] == [b"x", b"x", b"x", b"y"]
    assert fake.connections == 2


def test_blocking_client_does_not_import_trio() -> None:
    code = "import sys, pnsq.client.blocking; assert 'trio' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
