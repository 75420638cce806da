"""pnsq's nsqd and lookupd with the other real peers: pnsq's nsqd registering with a real Go
nsqlookupd 1.3.0 (stock consumers find it there), the real nsqadmin 1.3.0 reading pnsq's lookupd,
and lookupd restarts (nsqd keeps working and re-registers; lookupd keeps its placements)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import Daemon, Peer, go_lookupd, nsqadmin, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import (
    free_port,
    get_json,
    lookup,
    post,
    request,
    wait_for,
)
from tests.interop.drivers import CLIENTS, Driver

pytestmark = [pytest.mark.integration, pytest.mark.interop]


def test_pnsq_nsqd_registers_with_go_nsqlookupd(tmp_path: Path) -> None:
    go = go_lookupd(tmp_path / "go-lookupd").start()
    node = pnsq_nsqd(tmp_path / "node", f"--lookupd-tcp-address={go.tcp_address}").start()
    try:
        channels = [f"ch-{client}" for client in CLIENTS]
        assert post(node, "/topic/create?topic=stock")[0] == 200
        for channel in channels:
            assert post(node, f"/channel/create?topic=stock&channel={channel}")[0] == 200
        for i in range(10):
            assert post(node, "/pub?topic=stock", f"m{i}".encode()) == (200, b"OK")

        def registered() -> Any:
            found = lookup(go, "stock")
            return found if found and sorted(found["channels"]) == sorted(channels) else None

        found = wait_for(registered, what="registration with Go nsqlookupd")
        [producer] = found["producers"]
        assert (producer["tcp_port"], producer["http_port"]) == (node.tcp_port, node.http_port)
        assert producer["version"] == "1.3.0"
        for client, channel in zip(CLIENTS, channels, strict=True):
            driver = Driver(client)
            try:
                run = driver.run(
                    driver.sub_argv("", "stock", channel, 10, timeout=30, lookupd=go.http_address)
                )
            finally:
                driver.cleanup()
            assert run.returncode == 0, run.stderr[-3000:]
            assert sorted(str(d["body"]) for d in run.deliveries) == [f"m{i}" for i in range(10)]
        debug = get_json(go, "/debug")  # nothing but stock registrations reached Go
        assert sorted(debug) == sorted(
            ["client::", "topic:stock:", *(f"channel:stock:{c}" for c in channels)]
        )
    finally:
        node.stop()
        go.stop()
    refused = [line for line in go.log_text().splitlines() if " - E_" in line]
    assert refused == []  # Go nsqlookupd never had to refuse a command


# ---------------------------------------------------------------- nsqadmin


def has_topic(node: Daemon, topic: str) -> bool:
    stats = get_json(node, f"/stats?format=json&topic={topic}")
    return [t["topic_name"] for t in stats["topics"] or []] == [topic]


@pytest.fixture(scope="module")
def admin_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, list[Daemon]]]:
    work = tmp_path_factory.mktemp("admin-lookupd")
    lookupd = pnsq_lookupd(work / "lookupd").start()
    nodes: list[Daemon] = []
    admin: Peer | None = None
    try:
        for name in ("a", "b"):
            flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
            nodes.append(pnsq_nsqd(work / name, flag).start())
        assert post(lookupd, "/topic/create?topic=shown&partition_num=2") == (200, b"")
        for node in nodes:
            wait_for(lambda n=node: has_topic(n, "shown"), what="the assignment")  # type: ignore[misc]
            assert post(node, "/channel/create?topic=shown&channel=seen")[0] == 200
            assert post(node, "/pub?topic=shown", b"x") == (200, b"OK")

        def registered() -> bool:
            found = lookup(lookupd, "shown") or {"producers": [], "channels": []}
            return len(found["producers"]) == 2 and found["channels"] == ["seen"]

        wait_for(registered, what="registrations")
        flag = f"--lookupd-http-address={lookupd.http_address}"
        admin = nsqadmin(work / "admin", flags=(flag,)).start()
        yield admin, nodes
    finally:
        if admin is not None:
            admin.stop()
        for node in nodes:
            node.stop()
        lookupd.stop()


def admin_get(admin: Peer, path: str) -> Any:
    status, body, _ = request(f"{admin.url}{path}")
    assert status == 200, f"{path}: {status} {body!r}\n{admin.log_text()[-2000:]}"
    data = json.loads(body)
    assert data["message"] == "", data  # a warning: nsqadmin failed to read something
    return data


def test_nsqadmin_lists_topics(admin_setup: tuple[Peer, list[Daemon]]) -> None:
    admin, _ = admin_setup
    assert admin_get(admin, "/api/topics")["topics"] == ["shown"]


def test_nsqadmin_lists_nodes(admin_setup: tuple[Peer, list[Daemon]]) -> None:
    admin, nodes = admin_setup
    listed = admin_get(admin, "/api/nodes")["nodes"]
    assert sorted(n["tcp_port"] for n in listed) == sorted(n.tcp_port for n in nodes)
    for entry in listed:
        assert entry["topics"] == [{"topic": "shown", "tombstoned": False}]
        assert entry["version"] == "1.3.0"


def test_nsqadmin_topic_detail_has_nodes_and_channel(
    admin_setup: tuple[Peer, list[Daemon]],
) -> None:
    admin, nodes = admin_setup
    body = admin_get(admin, "/api/topics/shown")
    assert body["topic_name"] == "shown"
    assert sorted(n["node"] for n in body["nodes"]) == sorted(n.http_address for n in nodes)
    assert body["message_count"] == 2
    [channel] = body["channels"]
    assert channel["channel_name"] == "seen"
    assert channel["depth"] == 2


# ---------------------------------------------------------------- restarts


def test_nsqd_survives_lookupd_restarts_and_lookupd_keeps_placements(tmp_path: Path) -> None:
    tcp, http = free_port(), free_port()
    fixed = (f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}")
    lookupd = pnsq_lookupd(tmp_path / "lookupd", *fixed)
    # nsqd first, while no lookupd listens: it starts and works anyway
    node = pnsq_nsqd(tmp_path / "node", f"--lookupd-tcp-address=127.0.0.1:{tcp}").start()
    try:
        assert post(node, "/pub?topic=early", b"1") == (200, b"OK")
        lookupd.start()
        wait_for(lambda: lookup(lookupd, "early"), what="registration after lookupd came up")
        assert post(lookupd, "/topic/create?topic=kept&partition_num=2") == (200, b"")
        wait_for(
            lambda: len((lookup(lookupd, "kept") or {}).get("partitions", {})) == 2,
            what="placement",
        )
        lookupd.stop()
        assert post(node, "/pub?topic=kept", b"while down") == (200, b"OK")  # known: works
        # unknown while the pnsq lookupd that places topics is down: refused, not created
        status, body = post(node, "/pub?topic=during", b"new topic")
        assert status == 503
        assert body.startswith(b'{"message":"E_PUB_FAILED lookupd unreachable')
        lookupd.start()  # same ports, same --data-path

        def rebuilt() -> Any:
            found = lookup(lookupd, "kept", "&metainfo=true")
            if found and len(found["partitions"]) == 2 and found["producers"]:
                return found
            return None

        found = wait_for(rebuilt, timeout=20, what="re-registration")
        assert found["meta"]["partition_num"] == 2  # the placement survived the restart
        assert [p["tcp_port"] for p in found["producers"]] == [node.tcp_port]
        assert post(node, "/pub?topic=during", b"new topic") == (200, b"OK")  # lookupd is back
        wait_for(lambda: lookup(lookupd, "during"), what="the new topic adopted")
    finally:
        node.stop()
        lookupd.stop()


def test_put_config_points_nsqd_at_a_lookupd(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    node = pnsq_nsqd(tmp_path / "node").start()  # no --lookupd-tcp-address
    try:
        assert post(node, "/pub?topic=late", b"x") == (200, b"OK")
        body = json.dumps([lookupd.tcp_address]).encode()
        status, _, _ = request(
            f"http://{node.http_address}/config/nsqlookupd_tcp_addresses", "PUT", data=body
        )
        assert status == 200
        found = wait_for(lambda: lookup(lookupd, "late"), what="registration after PUT /config")
        assert [p["tcp_port"] for p in found["producers"]] == [node.tcp_port]
        status, _, _ = request(
            f"http://{node.http_address}/config/nsqlookupd_tcp_addresses", "PUT", data=b"[]"
        )
        assert status == 200
        wait_for(lambda: lookup(lookupd, "late")["producers"] == [], what="the peer to leave")
    finally:
        node.stop()
        lookupd.stop()
