"""Run the real peer clients (pynsq, go-nsq) as subprocesses and collect their JSON lines."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.daemons import GONSQ_INTEROP

PYNSQ_DRIVER = Path(__file__).with_name("pynsq_driver.py")
CLIENTS = ["pynsq", "go-nsq"]


@dataclass
class Run:
    """A finished driver run."""

    returncode: int
    lines: list[dict[str, object]]
    stderr: str

    @property
    def deliveries(self) -> list[dict[str, object]]:
        return [line for line in self.lines if "id_hex" in line]

    @property
    def summary(self) -> dict[str, object]:
        return next(
            (line for line in reversed(self.lines) if "done" in line or "published" in line), {}
        )

    def first(self, key: str) -> dict[str, object]:
        return next(line for line in self.lines if key in line)


@dataclass
class Driver:
    """Command lines for one client library."""

    client: str
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def _base(self, sub: str) -> list[str]:
        if self.client == "pynsq":
            return [sys.executable, str(PYNSQ_DRIVER), sub]
        if not GONSQ_INTEROP.exists():
            raise RuntimeError(f"{GONSQ_INTEROP} missing: run scripts/setup")
        return [str(GONSQ_INTEROP), sub]

    def _flag(self, name: str, value: object) -> list[str]:
        return [f"--{name}" if self.client == "pynsq" else f"-{name}", str(value)]

    def conn_flags(
        self,
        *,
        tls: bool = False,
        tls_ca: str = "",
        tls_cert: str = "",
        tls_key: str = "",
        snappy: bool = False,
        deflate: bool = False,
        deflate_level: int = 0,
        auth_secret: str = "",
    ) -> list[str]:
        """Connection-upgrade and AUTH options, for ``extra`` of pub_argv / sub_argv."""
        dash = "--" if self.client == "pynsq" else "-"
        argv = [f"{dash}{name}" for name, on in (("tls", tls), ("snappy", snappy)) if on]
        if deflate:
            argv.append(f"{dash}deflate")
        for name, value in (
            ("tls-ca", tls_ca),
            ("tls-cert", tls_cert),
            ("tls-key", tls_key),
            ("deflate-level", deflate_level),
            ("auth-secret", auth_secret),
        ):
            if value:
                argv += self._flag(name, value)
        return argv

    def _seconds(self, name: str, seconds: float) -> list[str]:
        return self._flag(name, seconds if self.client == "pynsq" else f"{seconds}s")

    def pub_argv(
        self,
        nsqd: str,
        topic: str,
        count: int,
        mode: str = "pub",
        defer_ms: int = 0,
        extra: Sequence[str] = (),
    ) -> list[str]:
        argv = self._base("pub") + self._flag("nsqd", nsqd) + self._flag("topic", topic)
        argv += extra
        argv += self._flag("count", count) + self._flag("mode", mode)
        if mode == "dpub":
            argv += (
                self._flag("defer-ms", defer_ms)
                if self.client == "pynsq"
                else self._flag("defer", f"{defer_ms}ms")
            )
        return argv

    def sub_argv(
        self,
        nsqd: str,
        topic: str,
        channel: str,
        count: int,
        *,
        requeue_until: int = 0,
        heartbeat: float = 30,
        idle: float = 0,
        timeout: float = 60,
        max_in_flight: int = 200,
        extra: Sequence[str] = (),
        lookupd: str = "",
    ) -> list[str]:
        """A consumer of ``nsqd`` (TCP address), or with ``lookupd`` (an nsqlookupd HTTP
        address; ``nsqd`` is then ignored) of every nsqd that lookupd lists."""
        source = self._flag("lookupd", lookupd) if lookupd else self._flag("nsqd", nsqd)
        argv = self._base("sub") + source + self._flag("topic", topic)
        argv += extra
        argv += self._flag("channel", channel) + self._flag("count", count)
        argv += self._flag("max-in-flight", max_in_flight)
        argv += self._flag("requeue-until-attempts", requeue_until)
        argv += self._seconds("heartbeat", heartbeat) + self._seconds("timeout", timeout)
        if idle:
            argv += self._seconds("idle", idle)
        return argv

    def run(self, argv: list[str], timeout: float = 90) -> Run:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        return _parse(proc.returncode, proc.stdout, proc.stderr)

    def start(self, argv: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout: float = 90) -> Run:
        stdout, stderr = proc.communicate(timeout=timeout)
        return _parse(proc.returncode, stdout, stderr)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _parse(returncode: int, stdout: str, stderr: str) -> Run:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return Run(returncode, lines, stderr)
