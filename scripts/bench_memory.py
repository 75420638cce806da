#!/usr/bin/env python3
"""Memory workloads for scripts/bench (python stdlib only): each drives one nsqd (pnsq's or Go's)
over protocol V2 on 127.0.0.1 and reads the daemon's memory from /proc/PID/status.

Subcommands (each prints one line "RSS_KIB PEAK_KIB NOTE..." on success, exits 1 otherwise):
  idle-conns ADDR PID COUNT    COUNT connections, each sending the magic and IDENTIFY {} and
                               holding on once it is answered (opened in batches, so that the
                               listen queue never drops a SYN); VmRSS with all of them open.
                               NOTE: the idle daemon's VmRSS before the first connection.
  big-messages ADDR PID COUNT SIZE
                               a consumer SUBs (RDY 0), COUNT PUBs of SIZE bytes (each waiting
                               for its OK), then RDY 10 and every message read and FINed;
                               VmRSS one second after the last FIN.
  big-messages-live ADDR PID COUNT SIZE
                               a consumer SUBs with RDY 10 and reads and FINs every message
                               while COUNT PUBs of SIZE bytes are made (each waiting for its
                               OK): every message consumed as it is published; VmRSS one
                               second after the last FIN.
  slow-consumer ADDR PID TOTAL SIZE
                               a consumer with RDY 1 FINs one message every 50 ms while TOTAL
                               bytes are published as MPUBs of 10 messages of SIZE bytes;
                               VmRSS one second after the last MPUB's OK.
PEAK_KIB is the daemon's VmHWM at the same moment. The caller needs an open-files limit above
COUNT (scripts/bench raises it with ulimit -n).
"""

from __future__ import annotations

import json
import selectors
import socket
import struct
import sys
import threading
import time
from pathlib import Path

MAGIC = b"  V2"
FRAME = struct.Struct(
    ">Ii"
)  # [u32 size (type + data)][i32 frame type: 0 response, 1 error, 2 message]
MESSAGE = struct.Struct(">qH16s")  # [i64 timestamp ns][u16 attempts][16 B message id], then body
SIZE = struct.Struct(">I")  # a command body's length prefix / MPUB's message count and lengths
HEARTBEAT = b"_heartbeat_"
BATCH = 500  # idle-conns: connections opened at once (well under net.core.somaxconn)


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def split_addr(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"{addr}: loopback addresses only")
    return host, int(port)


class Conn:
    """One blocking V2 connection."""

    def __init__(self, addr: str, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(split_addr(addr), timeout=timeout)
        self.file = self.sock.makefile("rb", buffering=1 << 20)
        self.sock.sendall(MAGIC)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[int, bytes]:
        """The next frame other than a heartbeat (answered with NOP)."""
        while True:
            header = self.file.read(FRAME.size)
            if len(header) < FRAME.size:
                raise ValueError("connection closed by the daemon")
            size, ftype = FRAME.unpack(header)
            data = self.file.read(size - 4)
            if ftype == 0 and data == HEARTBEAT:
                self.send(b"NOP\n")
                continue
            if ftype == 1:
                raise ValueError(f"daemon error: {data[:200]!r}")
            return ftype, data

    def ok(self) -> None:
        ftype, data = self.frame()
        if (ftype, data) != (0, b"OK"):
            raise ValueError(f"expected OK, got frame type {ftype}: {data[:100]!r}")

    def consumer(self, topic: str, channel: str, rdy: int) -> Conn:
        body = json.dumps({"client_id": "bench", "heartbeat_interval": 30000}).encode()
        self.send(b"IDENTIFY\n" + SIZE.pack(len(body)) + body)
        self.ok()
        self.send(f"SUB {topic} {channel}\n".encode())
        self.ok()
        self.send(f"RDY {rdy}\n".encode())
        return self

    def fin_next(self) -> int:
        """Read the next message, FIN it; its body size."""
        ftype, data = self.frame()
        if ftype != 2:
            raise ValueError(f"expected a message, got frame type {ftype}: {data[:100]!r}")
        _, _, msg_id = MESSAGE.unpack_from(data)
        self.send(b"FIN " + msg_id + b"\n")
        return len(data) - MESSAGE.size

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def idle_conns(addr: str, pid: int, count: int) -> str:
    before, _ = memory_kib(pid)
    identify = MAGIC + b"IDENTIFY\n" + SIZE.pack(2) + b"{}"
    answer = FRAME.pack(6, 0) + b"OK"
    held: list[socket.socket] = []
    selector = selectors.DefaultSelector()
    try:
        while len(held) < count:
            pending: dict[socket.socket, bytes] = {}
            for _ in range(min(BATCH, count - len(held))):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(sock)
                sock.connect(split_addr(addr))  # blocking: returns once the handshake is done
                sock.setblocking(False)
                sock.send(identify)  # tiny: fits the empty send buffer
                pending[sock] = b""
                selector.register(sock, selectors.EVENT_READ)
            deadline = time.monotonic() + 30
            while pending:
                if time.monotonic() > deadline:
                    raise ValueError(f"{len(pending)} IDENTIFYs unanswered after 30 s")
                for key, _ in selector.select(timeout=0.5):
                    ready = key.fileobj
                    if not isinstance(ready, socket.socket):
                        raise TypeError(ready)
                    chunk = ready.recv(64)
                    if not chunk:
                        raise ValueError(f"connection {len(held)} closed by the daemon")
                    got = pending[ready] + chunk
                    if len(got) >= len(answer):
                        if got != answer:
                            raise ValueError(f"IDENTIFY answered with {got[:100]!r}")
                        selector.unregister(ready)
                        del pending[ready]
                    else:
                        pending[ready] = got
        time.sleep(1)
        rss, peak = memory_kib(pid)
        return f"{rss} {peak} idle daemon before connecting: {before / 1024:.1f} MiB"
    finally:
        selector.close()
        for sock in held:
            sock.close()


def big_messages(addr: str, pid: int, count: int, size: int) -> str:
    consumer = Conn(addr).consumer("big", "ch", 0)
    producer = Conn(addr)
    body = b"m" * size
    for _ in range(count):
        producer.send(b"PUB big\n" + SIZE.pack(size) + body)
        producer.ok()
    consumer.send(b"RDY 10\n")
    for i in range(count):
        if consumer.fin_next() != size:
            raise ValueError(f"message {i}: wrong body size")
    consumer.send(b"NOP\n")  # the last FIN is written; give the daemon a moment to apply it
    time.sleep(1)
    rss, peak = memory_kib(pid)
    producer.close()
    consumer.close()
    return f"{rss} {peak}"


def big_messages_live(addr: str, pid: int, count: int, size: int) -> str:
    consumer = Conn(addr).consumer("live", "ch", 10)
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for i in range(count):
                if consumer.fin_next() != size:
                    raise ValueError(f"message {i}: wrong body size")
        except (OSError, ValueError) as exc:
            errors.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer = Conn(addr)
    body = b"m" * size
    for _ in range(count):
        producer.send(b"PUB live\n" + SIZE.pack(size) + body)
        producer.ok()
        if errors:
            break
    reader.join(60)
    if errors or reader.is_alive():
        raise ValueError(f"consumer: {errors[0] if errors else 'not done 60 s after the last PUB'}")
    consumer.send(b"NOP\n")  # the last FIN is written; give the daemon a moment to apply it
    time.sleep(1)
    rss, peak = memory_kib(pid)
    producer.close()
    consumer.close()
    return f"{rss} {peak}"


def slow_consumer(addr: str, pid: int, total: int, size: int) -> str:
    consumer = Conn(addr).consumer("slow", "ch", 1)
    stop = threading.Event()
    read: list[int] = []
    errors: list[BaseException] = []

    def slowly() -> None:
        try:
            while not stop.is_set():
                read.append(consumer.fin_next())
                time.sleep(0.05)
        except (OSError, ValueError) as exc:
            if not stop.is_set():
                errors.append(exc)

    reader = threading.Thread(target=slowly, daemon=True)
    reader.start()
    producer = Conn(addr)
    batch = 10
    mpub = b"MPUB slow\n" + SIZE.pack(4 + batch * (4 + size)) + SIZE.pack(batch)
    mpub += (SIZE.pack(size) + b"s" * size) * batch
    for _ in range(max(1, total // (batch * size))):
        producer.send(mpub)
        producer.ok()
        if errors:
            raise ValueError(f"slow consumer: {errors[0]}")
    time.sleep(1)
    rss, peak = memory_kib(pid)
    stop.set()
    producer.close()
    consumer.sock.shutdown(socket.SHUT_RDWR)
    reader.join(5)
    consumer.close()
    if errors:
        raise ValueError(f"slow consumer: {errors[0]}")
    return f"{rss} {peak} the consumer had read {len(read)} messages"


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, addr, pid, args = argv[0], argv[1], int(argv[2]), [int(a) for a in argv[3:]]
    try:
        if cmd == "idle-conns":
            print(idle_conns(addr, pid, args[0]))
        elif cmd == "big-messages":
            print(big_messages(addr, pid, args[0], args[1]))
        elif cmd == "big-messages-live":
            print(big_messages_live(addr, pid, args[0], args[1]))
        elif cmd == "slow-consumer":
            print(slow_consumer(addr, pid, args[0], args[1]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (ValueError, OSError, IndexError, TypeError) as exc:
        print(f"bench_memory {cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
