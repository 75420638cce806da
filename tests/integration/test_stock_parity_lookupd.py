"""nsqlookupd as stock NSQ 1.3.0 runs it, side by side with the real Go nsqlookupd: bare JSON
whatever the ``Accept`` header, and no state without ``--data-path``."""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from tests.daemons import NSQLOOKUPD, Daemon, go_lookupd, pnsq_lookupd
from tests.integration.lookupd_helpers import request

pytestmark = pytest.mark.integration

NO_ACCEPT: dict[str, str] = {}
ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Daemon]]:
    """(Go nsqlookupd, pnsq lookupd), both fresh."""
    go = go_lookupd(tmp_path_factory.mktemp("go") / "data").start()
    try:
        pnsq = pnsq_lookupd(tmp_path_factory.mktemp("pnsq") / "data").start()
        try:
            yield go, pnsq
        finally:
            pnsq.stop()
    finally:
        go.stop()


def answer(daemon: Daemon, path: str, headers: dict[str, str]) -> tuple[int, str | None, object]:
    status, body, reply_headers = request(f"http://{daemon.http_address}{path}", "GET", headers)
    return status, reply_headers["X-Nsq-Content-Type"], json.loads(body)


@pytest.mark.parametrize("headers", [NO_ACCEPT, ACCEPT], ids=["no-accept", "accept-v1"])
@pytest.mark.parametrize(
    "path",
    [
        "/lookup?topic=never_seen",
        "/lookup",
        "/topics",
        "/channels?topic=never_seen",
        "/channels",
        "/nodes",
        "/info",
        "/debug",
    ],
)
def test_read_endpoints_answer_bare_json_as_go(
    pair: tuple[Daemon, Daemon], path: str, headers: dict[str, str]
) -> None:
    go, pnsq = pair
    expected = answer(go, path, headers)
    assert answer(pnsq, path, headers) == expected
    if path == "/lookup?topic=never_seen":
        assert expected == (404, "nsq; version=1.0", {"message": "TOPIC_NOT_FOUND"})


def test_lookup_of_a_created_topic_is_bare_without_accept(pair: tuple[Daemon, Daemon]) -> None:
    for daemon in pair:
        url = f"http://{daemon.http_address}/topic/create?topic=made"
        assert request(url, "POST", NO_ACCEPT)[0] == 200
    go, pnsq = (answer(d, "/lookup?topic=made", NO_ACCEPT) for d in pair)
    assert go == (200, "nsq; version=1.0", {"channels": [], "producers": []})
    status, header, document = pnsq
    assert (status, header) == (200, "nsq; version=1.0")
    assert isinstance(document, dict)
    assert {k: document[k] for k in ("channels", "producers")} == go[2]  # plus youzan's keys


def bare_lookupd(binary: list[str], cwd: Path) -> Daemon:
    """A lookupd started in ``cwd`` without ``--data-path`` (as stock nsqlookupd runs)."""
    cwd.mkdir(parents=True, exist_ok=True)
    argv = [
        *binary,
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--broadcast-address=127.0.0.1",
    ]
    return Daemon(argv, cwd, cwd.parent / f"{cwd.name}.log")


@pytest.mark.parametrize("which", ["go-nsqlookupd", "pnsq"])
def test_without_data_path_nothing_is_written_and_a_restart_starts_empty(
    tmp_path: Path, which: str
) -> None:
    binary = [str(NSQLOOKUPD)] if which == "go-nsqlookupd" else [sys.executable, "-m", "lookupd"]
    cwd = tmp_path / "cwd"
    daemon = bare_lookupd(binary, cwd).start()
    try:
        base = f"http://{daemon.http_address}"
        assert request(f"{base}/topic/create?topic=kept", "POST", NO_ACCEPT)[0] == 200
        assert request(f"{base}/channel/create?topic=kept&channel=c", "POST", NO_ACCEPT)[0] == 200
        assert answer(daemon, "/topics", ACCEPT)[2] == {"topics": ["kept"]}
    finally:
        daemon.stop()
    assert sorted(p.name for p in cwd.iterdir()) == []
    daemon.start()
    try:
        assert answer(daemon, "/topics", ACCEPT)[2] == {"topics": []}
        assert answer(daemon, "/channels?topic=kept", ACCEPT)[2] == {"channels": []}
        assert answer(daemon, "/nodes", ACCEPT)[2] == {"producers": []}
        assert answer(daemon, "/lookup?topic=kept", ACCEPT)[0] == 404
    finally:
        daemon.stop()
    assert sorted(p.name for p in cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "//nodes"),
        ("GET", "/LOOKUP?topic=x"),
        ("GET", "/./info/"),
        ("POST", "/Topic/Create?topic=x"),
        ("GET", "/topic/create"),  # no GET route: 404
        ("GET", "/nope"),
    ],
)
def test_untidy_paths_redirect_as_go(pair: tuple[Daemon, Daemon], method: str, path: str) -> None:
    """httprouter's RedirectFixedPath: 301 for GET, 307 for any other method, to the route's
    own spelling with the query."""
    go, pnsq = pair

    def seen(daemon: Daemon) -> tuple[int, str | None, str]:
        status, _, headers = no_redirect(f"http://{daemon.http_address}{path}", method)
        return status, headers.get("Location"), status_line(daemon, method, path)

    assert seen(pnsq) == seen(go)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def no_redirect(url: str, method: str) -> tuple[int, bytes, Message]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def status_line(daemon: Daemon, method: str, path: str) -> str:
    """The first line of the daemon's answer, as sent."""
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=5) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return sock.makefile("rb").readline().decode().rstrip("\r\n")
