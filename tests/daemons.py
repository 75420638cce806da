"""Start real daemons for tests: pnsq's nsqd (``python -m nsqd``) and nsqlookupd (``python -m
lookupd``), the Go nsqd and nsqlookupd 1.3.0, and the other real peers: nsqadmin 1.3.0 and
Prometheus.

Each listens on 127.0.0.1 with port 0; the bound ports are read from the daemon's own log line
``TCP: listening on HOST:PORT`` / ``HTTP: listening on HOST:PORT`` (Go's lines; pnsq's too).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"
GO_NSQD = TOOLS / "nsq-1.3.0" / "bin" / "nsqd"
GONSQ_INTEROP = TOOLS / "bin" / "gonsq-interop"

_TCP = re.compile(r"TCP: listening on \[?([^\s\]]+?)\]?:(\d+)")
_HTTP = re.compile(r"HTTP: listening on (?:http://)?\[?([^\s\]]+?)\]?:(\d+)")


@dataclass
class Daemon:
    """A running nsqd process and where it listens."""

    argv: list[str]
    data_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    tcp_port: int = 0
    http_port: int = 0
    extra: list[str] = field(default_factory=list)
    #: RLIMIT_NOFILE ``(soft, hard)`` to run under; None: the test runner's
    open_files: tuple[int, int] | None = None

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 20.0) -> Daemon:
        """Start (or restart on the same data path) and wait until both ports answer."""

        def ready(text: str) -> bool:
            tcp, http = _TCP.search(text), _HTTP.search(text)
            if not (tcp and http):
                return False
            self.tcp_port, self.http_port = int(tcp[2]), int(http[2])
            return self._ping()

        self.proc = _launch(
            self.argv, self.log_path, self.data_path, ready, timeout, self.open_files
        )
        if self.proc is None:
            raise RuntimeError(f"daemon did not start: {self.argv}\n{self.log_text()}")
        return self

    def _ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_address}/ping", timeout=1) as r:
                return bool(r.read() == b"OK")
        except urllib.error.HTTPError as e:
            if e.code == 500:  # answering, but unhealthy (a disk past its mark): "NOK - ..."
                return e.read().startswith(b"NOK")
            return e.code == 403  # --tls-required=true: plain HTTP answers TLS_REQUIRED
        except OSError:
            return False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no chance to checkpoint."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; returns the exit status."""
        return _terminate(self.proc, timeout)


def cluster_secret_flag(path: Path, secret: str = "test cluster secret") -> str:
    """``--cluster-secret-file=<path>`` with ``secret`` written to ``path``."""
    path.write_text(secret + "\n")
    return f"--cluster-secret-file={path}"


def _needs_cluster_secret(flags: tuple[str, ...]) -> bool:
    """A cluster node of pnsq (one given --lookupd-tcp-address) refuses --auth-http-address and
    --tls-required (also implied by --tls-client-auth-policy) without a cluster credential
    (docs/security.md); tests of those features on a cluster get one unless they bring theirs.
    A standalone nsqd needs none (it serves no replication)."""
    if any(flag.startswith("--cluster-secret-file") for flag in flags):
        return False
    if not any(flag.startswith("--lookupd-tcp-address") for flag in flags):
        return False
    return any(
        flag.startswith("--auth-http-address")
        or (flag.startswith("--tls-required") and not flag.endswith("=false"))
        or (flag.startswith("--tls-client-auth-policy=") and not flag.endswith("="))
        for flag in flags
    )


def pnsq_nsqd(data_path: Path, *flags: str) -> Daemon:
    """pnsq's nsqd on ephemeral loopback ports (not started)."""
    data_path.mkdir(parents=True, exist_ok=True)
    if _needs_cluster_secret(flags):
        flags = (*flags, cluster_secret_flag(data_path.parent / f"{data_path.name}.secret"))
    argv = [
        sys.executable,
        "-m",
        "nsqd",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--data-path={data_path}",
        "--broadcast-address=127.0.0.1",
        *flags,
    ]
    return Daemon(argv, data_path, data_path.parent / f"{data_path.name}.log")


def go_nsqd(data_path: Path, *flags: str) -> Daemon:
    """The real Go nsqd 1.3.0 (installed by scripts/setup) on ephemeral loopback ports."""
    if not GO_NSQD.exists():
        raise RuntimeError(f"{GO_NSQD} missing: run scripts/setup")
    data_path.mkdir(parents=True, exist_ok=True)
    argv = [
        str(GO_NSQD),
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--data-path={data_path}",
        "--broadcast-address=127.0.0.1",
        *flags,
    ]
    return Daemon(argv, data_path, data_path.parent / f"{data_path.name}.log")


def pnsq_lookupd(data_path: Path, *flags: str) -> Daemon:
    """pnsq's nsqlookupd on ephemeral loopback ports, metadata in ``data_path`` (not started)."""
    data_path.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "lookupd",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--broadcast-address=127.0.0.1",
        f"--data-path={data_path}",
        *flags,
    ]
    return Daemon(argv, data_path, data_path.parent / f"{data_path.name}.log")


def go_lookupd(data_path: Path, *flags: str) -> Daemon:
    """The real Go nsqlookupd 1.3.0 (installed by scripts/setup) on ephemeral loopback ports."""
    if not NSQLOOKUPD.exists():
        raise RuntimeError(f"{NSQLOOKUPD} missing: run scripts/setup")
    data_path.mkdir(parents=True, exist_ok=True)
    argv = [
        str(NSQLOOKUPD),
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--broadcast-address=127.0.0.1",
        *flags,
    ]
    return Daemon(argv, data_path, data_path.parent / f"{data_path.name}.log")


def env_with_tools() -> dict[str, str]:
    """The environment with .tools/bin first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{TOOLS / 'bin'}:{env.get('PATH', '')}"
    return env


# --- Other real peers: nsqadmin 1.3.0 and Prometheus (both installed by scripts/setup) ---

NSQADMIN = TOOLS / "nsq-1.3.0" / "bin" / "nsqadmin"
NSQLOOKUPD = TOOLS / "nsq-1.3.0" / "bin" / "nsqlookupd"

_PROMETHEUS_LISTEN = re.compile(r'msg="Listening on" address=\[?([^\s\]]+?)\]?:(\d+)')


@dataclass
class Peer:
    """A helper process on an ephemeral loopback port, found in its log by ``listen`` and
    ready once ``ready_path`` answers 200."""

    argv: list[str]
    log_path: Path
    listen: re.Pattern[str]
    ready_path: str
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self, timeout: float = 20.0) -> Peer:
        def ready(text: str) -> bool:
            found = self.listen.search(text)
            if not found:
                return False
            self.port = int(found[2])
            return self._ready()

        self.proc = _launch(self.argv, self.log_path, self.cwd, ready, timeout)
        if self.proc is None:
            raise RuntimeError(f"did not start: {self.argv}\n{self.log_text()}")
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}{self.ready_path}", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit status."""
        return _terminate(self.proc, timeout)


def nsqadmin(work: Path, *nsqd_http_addresses: str, flags: tuple[str, ...] = ()) -> Peer:
    """The real nsqadmin 1.3.0 reading the given nsqd HTTP addresses (not started)."""
    if not NSQADMIN.exists():
        raise RuntimeError(f"{NSQADMIN} missing: run scripts/setup")
    work.mkdir(parents=True, exist_ok=True)
    argv = [
        str(NSQADMIN),
        "--http-address=127.0.0.1:0",
        *(f"--nsqd-http-address={a}" for a in nsqd_http_addresses),
        *flags,
    ]
    return Peer(argv, work / "nsqadmin.log", _HTTP, "/ping", cwd=work)


def prometheus_binary() -> str | None:
    """Debian's prometheus (scripts/setup installs it), or None."""
    return shutil.which("prometheus")


def prometheus(
    work: Path, targets: list[str], metrics_path: str = "/metrics", interval: float = 1.0
) -> Peer:
    """A real Prometheus server scraping ``targets`` (host:port) every ``interval`` seconds,
    with its own config and TSDB under ``work`` (not started)."""
    binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("prometheus not on PATH: run scripts/setup")
    work.mkdir(parents=True, exist_ok=True)
    config = work / "prometheus.yml"
    quoted = ", ".join(f"'{t}'" for t in targets)
    every = f"{round(interval * 1000)}ms"  # Prometheus durations take no fractions
    config.write_text(
        "global:\n"
        f"  scrape_interval: {every}\n"
        f"  scrape_timeout: {every}\n"
        f"  evaluation_interval: {every}\n"
        "scrape_configs:\n"
        "  - job_name: pnsq\n"
        f"    metrics_path: {metrics_path}\n"
        "    static_configs:\n"
        f"      - targets: [{quoted}]\n"
    )
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={work / 'tsdb'}",
        "--web.listen-address=127.0.0.1:0",  # the bound port is read from its log
    ]
    return Peer(argv, work / "prometheus.log", _PROMETHEUS_LISTEN, "/-/ready", cwd=work)


STATSD_EXPORTER = TOOLS / "bin" / "statsd_exporter"
_STATSD_EXPORTER_LISTEN = re.compile(r'msg="Accepting Prometheus Requests" addr=([^\s:]+):(\d+)')


def _free_port(kind: socket.SocketKind) -> int:
    """A loopback port free now (statsd_exporter logs the address it was given, not the one
    bound, so its ports are chosen here)."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def statsd_exporter(work: Path) -> tuple[Peer, int]:
    """Prometheus's statsd_exporter (built by scripts/setup; else one on PATH) listening for
    statsd on a loopback UDP port, and that port (not started)."""
    binary = str(STATSD_EXPORTER) if STATSD_EXPORTER.exists() else shutil.which("statsd_exporter")
    if binary is None:
        raise RuntimeError(f"{STATSD_EXPORTER} missing: run scripts/setup")
    work.mkdir(parents=True, exist_ok=True)
    udp_port = _free_port(socket.SOCK_DGRAM)
    argv = [
        binary,
        f"--web.listen-address=127.0.0.1:{_free_port(socket.SOCK_STREAM)}",
        f"--statsd.listen-udp=127.0.0.1:{udp_port}",
        "--statsd.listen-tcp=",
    ]
    peer = Peer(argv, work / "statsd_exporter.log", _STATSD_EXPORTER_LISTEN, "/metrics", cwd=work)
    return peer, udp_port


def _launch(
    argv: list[str],
    log_path: Path,
    cwd: Path | None,
    ready: Callable[[str], bool],
    timeout: float,
    open_files: tuple[int, int] | None = None,
) -> subprocess.Popen[bytes] | None:
    """Start ``argv`` with output appended to ``log_path`` (under ``RLIMIT_NOFILE`` =
    ``open_files``, if given); poll until ``ready`` (given the log written since the start) is
    true. Returns the process, or None after stopping it when it exited or was not ready within
    ``timeout``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    offset = log_path.stat().st_size

    def limit() -> None:
        assert open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, open_files)

    preexec = None if open_files is None else limit
    proc = subprocess.Popen(argv, stdout=log, stderr=log, cwd=cwd, preexec_fn=preexec)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready(log_path.read_bytes()[offset:].decode(errors="replace")):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    _terminate(proc, 15.0)
    return None


def _terminate(proc: subprocess.Popen[bytes] | None, timeout: float) -> int | None:
    """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit status."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode
