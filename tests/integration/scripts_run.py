"""``scripts/run`` driven by a test: in its own session (so every process it started can be
seen and killed), on ports moved by ``PNSQ_PORT_OFFSET`` (free ones, so it can run beside other
tests), data in a temporary folder (``PNSQ_DATA``), the daemons from this checkout
(``PNSQ_PYTHON``)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.daemons import ROOT

# scripts/run's ports before the offset: etcd client and peer, two lookupds, three nsqd
PORTS = (2379, 2380, 4160, 4161, 4260, 4261, 4150, 4151, 4250, 4251, 4350, 4351)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_offset() -> int:
    """An offset putting every port below the ephemeral range (where the other tests' free
    ports come from) and free now."""
    for _ in range(100):
        offset = random.randrange(8000, 28000, 10)
        if all(_free(port + offset) for port in PORTS):
            return offset
    raise AssertionError("no free ports for scripts/run")


class Run:
    """``scripts/run ARGS`` started in ``data``'s folder, its output in ``run.log`` beside."""

    def __init__(self, data: Path, *args: str) -> None:
        self.data = data
        self.offset = free_offset()
        self.log_path = data.parent / "run.log"
        self.env = {
            **os.environ,
            "PNSQ_DATA": str(data),
            "PNSQ_PORT_OFFSET": str(self.offset),
            "PNSQ_PYTHON": sys.executable,
        }
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(ROOT / "scripts" / "run"), *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def url(self, port: int) -> str:
        return f"http://127.0.0.1:{port + self.offset}"

    def address(self, port: int) -> str:
        return f"127.0.0.1:{port + self.offset}"

    def group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running(data: Path, *args: str) -> Iterator[Run]:
    """:class:`Run`, whatever is left of its process group killed at the end."""
    started = Run(data, *args)
    try:
        yield started
    finally:
        if started.group_alive():
            os.killpg(started.proc.pid, signal.SIGKILL)
        started.proc.wait(10)
