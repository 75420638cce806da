"""Record the fuzzer's seed corpus: real client sessions, captured by a recording TCP proxy.

    python -m tests.fuzz.record [--out tests/fuzz/corpus]

Starts a pnsq nsqd, puts a proxy in front of its TCP and HTTP ports, and runs through it:
pynsq 0.9.1 and go-nsq (the interop drivers) publishing (PUB, MPUB, DPUB) and consuming, plain
and with snappy/deflate; a few HTTP requests (urllib). Each client->server byte stream becomes
one file ``<client>-<what>-<n>.bin`` (``http-*.bin`` go to the HTTP port). The youzan sessions
are not captured (youzan go-nsq cannot be fetched): they are written from the exact handshakes
of reference/youzan-nsq.md §11.4 by :func:`youzan_sessions`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import tempfile
import threading
import urllib.request
from pathlib import Path

from tests.daemons import pnsq_nsqd
from tests.interop.drivers import Driver
from tests.youzan import ext_body, pub_line, sized

CORPUS = Path(__file__).with_name("corpus")


class RecordingProxy:
    """Accepts on 127.0.0.1:0 and forwards to ``target``; keeps each connection's
    client->server bytes in ``sessions`` (in connection order)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sessions: list[bytearray] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            record = bytearray()
            with self._lock:
                self.sessions.append(record)
            threading.Thread(
                target=self._pump, args=(client, upstream, record), daemon=True
            ).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        try:
            while chunk := src.recv(65536):
                if record is not None:
                    record += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def take(self) -> list[bytes]:
        """The sessions recorded so far (and forget them)."""
        with self._lock:
            out = [bytes(s) for s in self.sessions if s]
            self.sessions.clear()
        return out

    def close(self) -> None:
        self._listener.close()


def youzan_sessions() -> dict[str, bytes]:
    """youzan go-nsq's handshakes (reference/youzan-nsq.md §11.4, tests/youzan.py)."""
    identify = {
        "client_id": "fuzz",
        "hostname": "fuzz",
        "user_agent": "go-nsq/1.7.12 HA",
        "short_id": "fuzz",
        "long_id": "fuzz",
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "snappy": False,
        "multiplexing": False,
        "feature_negotiation": True,
        "heartbeat_interval": 30000,
        "sample_rate": 0,
        "output_buffer_size": 0,
        "output_buffer_timeout": 150,
        "msg_timeout": 0,
        "desired_tag": "",
    }

    def ident(**extra: object) -> bytes:
        return b"IDENTIFY\n" + sized(json.dumps({**identify, **extra}, sort_keys=True).encode())

    trace = struct.Struct(">Q")
    mpub_trace = struct.pack(">i", 2) + b"".join(
        sized(trace.pack(7 + i) + body) for i, body in enumerate([b"first", b"second"])
    )
    return {
        "youzan-consumer-ordered": b"  V2"
        + ident(extend_support=True)
        + b"SUB_ORDERED t c 0\nRDY 1\nNOP\nFIN "
        + bytes(16)
        + b"\nCLS\n",
        "youzan-consumer-advanced": b"  V2"
        + ident(extend_support=True)
        + b"SUB_ADVANCED t c 0 msgcount:0\nRDY 1\nTOUCH "
        + bytes(16)
        + b"\nREQ "
        + bytes(16)
        + b" 10\nCLS\n",
        "youzan-producer-partition": b"  V2"
        + ident()
        + pub_line("t", b"hello", 0)
        + pub_line("t", b"again", 0),
        "youzan-producer-trace": b"  V2"
        + ident()
        + b"PUB_TRACE t 0\n"
        + sized(trace.pack(42) + b"traced")
        + b"MPUB_TRACE t 0\n"
        + sized(mpub_trace),
        "youzan-producer-ext": b"  V2"
        + ident(extend_support=True)
        + b"PUB_EXT t 0\n"
        + sized(ext_body({"##trace_id": "9"}, b"with ext")),
    }


def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        nsqd = pnsq_nsqd(Path(tmp) / "nsqd").start()
        try:
            tcp = RecordingProxy(("127.0.0.1", nsqd.tcp_port))
            http = RecordingProxy(("127.0.0.1", nsqd.http_port))
            address = f"127.0.0.1:{tcp.port}"
            files: dict[str, bytes] = {}
            for client in ("pynsq", "go-nsq"):
                driver = Driver(client)
                upgrades = {
                    "plain": [],
                    "snappy": driver.conn_flags(snappy=True),
                    "deflate": driver.conn_flags(deflate=True, deflate_level=6),
                }
                for mode in ("pub", "mpub", "dpub"):
                    run = driver.run(driver.pub_argv(address, "t", 3, mode, defer_ms=10))
                    assert run.returncode == 0, (run.lines[-3:], run.stderr)
                    for i, session in enumerate(tcp.take()):
                        files[f"{client}-{mode}-{i}"] = session
                for name, extra in upgrades.items():
                    topic = f"{client}-{name}"
                    run = driver.run(driver.pub_argv(address, topic, 3, extra=extra))
                    assert run.returncode == 0, run.stderr
                    tcp.take()  # a publish session again, compressed: the sub is what we want
                    run = driver.run(
                        driver.sub_argv(address, topic, "c", 3, timeout=20, extra=extra)
                    )
                    assert run.returncode == 0, (run.lines[-3:], run.stderr)
                    for i, session in enumerate(tcp.take()):
                        files[f"{client}-sub-{name}-{i}"] = session
            base = f"http://127.0.0.1:{http.port}"
            mpub = struct.pack(">i", 2) + sized(b"one") + sized(b"two")
            for name, path, body in (
                ("http-pub", "/pub?topic=t", b"hello"),
                ("http-mpub-binary", "/mpub?topic=t&binary=true", mpub),
                ("http-mpub-lines", "/mpub?topic=t", b"one\ntwo\n"),
                ("http-topic-create", "/topic/create?topic=fresh", None),
                ("http-stats", "/stats?format=json", None),
            ):
                method = "GET" if name == "http-stats" else "POST"
                request = urllib.request.Request(base + path, data=body, method=method)
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                (files[name],) = http.take()
            files.update(youzan_sessions())
            tcp.close()
            http.close()
        finally:
            nsqd.stop()
    for old in out.glob("*.bin"):
        old.unlink()
    for name, data in sorted(files.items()):
        (out / f"{name}.bin").write_bytes(data)
        print(f"{name}.bin {len(data)} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS)
    record(parser.parse_args().out)


if __name__ == "__main__":
    main()
