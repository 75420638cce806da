"""A real etcd v3 server for tests (Debian's ``etcd-server``, installed by scripts/setup): one
member on a temporary data directory and free loopback ports, started, stopped and started
again on the same ports and data (an outage of the lookupds' etcd)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.daemons import _launch, _terminate
from tests.integration.lookupd_helpers import free_port


def etcd_binary() -> str:
    """The etcd on PATH; scripts/setup installs it."""
    found = shutil.which("etcd")
    if found is None:
        raise RuntimeError("etcd missing: run scripts/setup (Debian's etcd-server)")
    return found


@dataclass
class Etcd:
    """One etcd member under ``work`` (not started)."""

    work: Path
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    proc: object = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.work / "etcd.log"

    def argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            etcd_binary(),
            "--name=default",
            f"--data-dir={self.work / 'data'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=warn",
        ]

    def start(self, timeout: float = 20.0) -> Etcd:
        """Start (or restart on the same data and ports) and wait until it serves a read."""
        self.work.mkdir(parents=True, exist_ok=True)
        proc = _launch(self.argv(), self.log_path, self.work, lambda _: self.ready(), timeout)
        if proc is None:
            text = self.log_path.read_text(errors="replace")
            raise RuntimeError(f"etcd did not start:\n{text}")
        self.proc = proc
        return self

    def ready(self) -> bool:
        try:
            self.call("/v3/kv/range", {"key": "AA=="})
        except OSError:
            return False
        return True

    def call(self, path: str, body: dict[str, object]) -> dict[str, object]:
        """One JSON gateway request."""
        request = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=2) as reply:
            return dict(json.loads(reply.read()))

    def stop(self) -> int | None:
        """SIGTERM and wait."""
        return _terminate(self.proc, 10.0)  # type: ignore[arg-type]
