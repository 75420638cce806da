"""PlainSocketStream: the V2 sessions' socket stream keeps every promise of a Trio stream
(Trio's own generic stream checks) while calling the socket directly."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing

from pnsq._netio.plain_stream import PlainSocketStream


async def _pair() -> tuple[PlainSocketStream, PlainSocketStream]:
    left, right = trio.socket.socketpair()
    return PlainSocketStream(left), PlainSocketStream(right)


async def _fill(stream: PlainSocketStream) -> None:
    """Send until the kernel's buffers are full and the sender blocks."""

    async def sender() -> None:
        while True:
            await stream.send_all(b"x" * 10_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()


async def _clogged_pair() -> tuple[PlainSocketStream, PlainSocketStream]:
    left, right = await _pair()
    await _fill(left)
    await _fill(right)
    return left, right


async def test_trio_generic_stream_checks() -> None:
    """Checkpoints, cancellation, closing, EOF, conflicts, blocking sends: Trio's suite."""
    await trio.testing.check_half_closeable_stream(_pair, _clogged_pair)


async def _tcp_pair() -> tuple[PlainSocketStream, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    accepted.setblocking(False)
    return PlainSocketStream(trio.socket.from_stdlib_socket(accepted)), client


async def test_a_large_send_arrives_whole_and_in_order_past_a_slow_reader() -> None:
    """A send larger than the socket buffers goes out in parts as the peer reads."""
    stream, peer = await _tcp_pair()
    data = b"".join(struct.pack(">I", i) for i in range(2_000_000))  # 8 MB, every word unique
    received = bytearray()

    def read_slowly() -> None:
        while len(received) < len(data):
            chunk = peer.recv(65536)
            if not chunk:
                return
            received.extend(chunk)

    with peer:
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, read_slowly)
            with trio.fail_after(30):
                await stream.send_all(data)
    assert bytes(received) == data


async def test_a_reset_peer_is_a_broken_stream() -> None:
    stream, peer = await _tcp_pair()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # linger 0: RST
    async with stream:
        with pytest.raises(trio.BrokenResourceError):
            await stream.receive_some(100)
        with pytest.raises(trio.BrokenResourceError):
            await _send_until_refused(stream)


async def _send_until_refused(stream: PlainSocketStream) -> None:
    for _ in range(100):  # the first sends after a reset may still be accepted by the kernel
        await stream.send_all(b"x" * 65536)


async def test_bytes_already_waiting_are_read_without_waiting_for_the_poller() -> None:
    """The read is tried first (one scheduler pass), and a close afterwards is seen."""
    stream, peer = await _tcp_pair()
    with peer:
        peer.sendall(b"PUB t\n")
        await trio.testing.wait_all_tasks_blocked()
        with trio.testing.assert_checkpoints():
            assert await stream.receive_some(100) == b"PUB t\n"
        peer.shutdown(socket.SHUT_WR)
        assert await stream.receive_some(100) == b""
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some(100)
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"x")


async def test_receive_nowait_takes_what_is_there_without_a_checkpoint() -> None:
    stream, peer = await _tcp_pair()
    with peer:
        with trio.testing.assert_no_checkpoints():
            assert stream.receive_nowait() is None  # nothing yet
        peer.sendall(b"NOP\n")
        await trio.testing.wait_all_tasks_blocked()
        with trio.testing.assert_no_checkpoints():
            assert stream.receive_nowait(100) == b"NOP\n"
        peer.shutdown(socket.SHUT_WR)
        assert stream.receive_nowait() == b""  # the peer closed
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            stream.receive_nowait()


async def test_receive_nowait_refuses_while_another_task_receives() -> None:
    stream, peer = await _tcp_pair()
    with peer:
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(stream.receive_some, 100)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                stream.receive_nowait()
            peer.sendall(b"x")
