"""lookupd's router under the cluster credential, in process: which routes are cluster-control
(every one that moves or reveals placement, none of NSQ's own), what a request without the
credential gets, and that an HA follower sends its own credential with what it forwards to the
leader."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from lookupd.core.views import Timeouts
from lookupd.http.api import LookupHTTP
from lookupd.http.base import Request
from lookupd.http.forward import Forwarder
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from protocol.cluster_auth import HTTP_HEADER, http_credential, http_headers

SECRET = b"unit secret"
CONTROL_PREFIXES = ("/pnsq/", "/cluster/", "/topic/partition/", "/topic/meta/update")


def app(secret: bytes = SECRET) -> LookupHTTP:
    cluster = Cluster(MetadataStore(None), Timeouts())
    return LookupHTTP(cluster, "1.3.0", lambda: ("127.0.0.1", 4160, 4161), secret=secret)


async def call(
    lookup: LookupHTTP, method: str, path: str, headers: list[tuple[bytes, bytes]]
) -> tuple[int, bytes]:
    scope = {"type": "http", "method": method, "path": path, "query_string": b"node=n:1"}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await lookup(scope | {"headers": headers}, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


def test_the_control_routes_are_exactly_those_that_move_or_reveal_placement() -> None:
    routes = app().routes
    control = {path for path, (_, route) in routes.items() if route.control}
    assert control == {path for path in routes if path.startswith(CONTROL_PREFIXES)}
    assert control >= {"/pnsq/assignments", "/pnsq/progress", "/pnsq/leaving"}
    assert "/metrics" in routes
    assert "/metrics" not in control


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([], 401),
        ([(b"x-pnsq-cluster-auth", http_credential(b"other").encode())], 401),
        ([(b"x-pnsq-cluster-auth", SECRET)], 401),  # the secret itself is not the credential
        ([(b"X-Pnsq-Cluster-Auth", http_credential(SECRET).encode())], 200),
    ],
)
def test_a_control_route_needs_the_credential(
    headers: list[tuple[bytes, bytes]], status: int
) -> None:
    answer = trio.run(call, app(), "GET", "/pnsq/assignments", headers)
    assert answer[0] == status
    if status == 401:
        assert json.loads(answer[1]) == {"message": "CLUSTER_AUTH_REQUIRED"}


def test_without_a_secret_nothing_is_asked() -> None:
    assert trio.run(call, app(b""), "GET", "/pnsq/assignments", [])[0] == 200
    assert http_headers(b"") == {}
    assert http_headers(SECRET) == {HTTP_HEADER: http_credential(SECRET)}


def test_a_stock_route_needs_no_credential() -> None:
    assert trio.run(call, app(), "GET", "/nodes", [])[0] == 200


@pytest.mark.parametrize(
    "given",
    [[], [(b"x-pnsq-cluster-auth", b"a stranger's value")]],
    ids=["none", "a-strangers"],
)
def test_a_forwarded_write_carries_the_forwarding_lookupds_own_credential(
    given: list[tuple[bytes, bytes]],
) -> None:
    """The lookupd-to-lookupd hop is authenticated by the forwarder, whatever the client sent
    (the follower let the request through its own checks first)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    async def forward() -> None:
        forwarder = Forwarder(SECRET)
        forwarder._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        request = Request("POST", "/topic/create", "topic=t", given)
        assert (await forwarder.forward("leader:4161", request)).status == 200
        await forwarder.aclose()

    trio.run(forward)
    assert seen[0].headers.get_list(HTTP_HEADER) == [http_credential(SECRET)]
    assert seen[0].headers["x-pnsq-forwarded"] == "1"


def test_without_a_secret_a_forward_carries_no_credential() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    async def forward() -> None:
        forwarder = Forwarder()
        forwarder._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        given = [(b"x-pnsq-cluster-auth", b"anything")]
        await forwarder.forward("leader:4161", Request("POST", "/topic/create", "topic=t", given))
        await forwarder.aclose()

    trio.run(forward)
    assert HTTP_HEADER not in seen[0].headers
