"""nsqd registers with the lookupds youzan's ``/listlookup`` names, not only those it is given:
an HA lookupd names every live lookupd of its cluster (so nsqd given one of them finds the
other), a lone lookupd names itself (no second registration with it)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.etcd import Etcd
from tests.integration.lookupd_helpers import get_json, wait_for

pytestmark = pytest.mark.integration


def _producers(lookupd: Daemon) -> list[dict[str, Any]]:
    return list(get_json(lookupd, "/nodes")["producers"])


def test_nsqd_given_one_ha_lookupd_registers_with_the_other_it_names(tmp_path: Path) -> None:
    etcd = Etcd(tmp_path / "etcd").start()
    flags = ("--cluster-id=disc", f"--cluster-leadership-addresses={etcd.url}")
    first = pnsq_lookupd(tmp_path / "l1", *flags)
    second = pnsq_lookupd(tmp_path / "l2", *flags)
    node = None
    try:
        first.start()
        second.start()
        wait_for(
            lambda: len(get_json(first, "/listlookup")["lookupdnodes"]) == 2,
            what="both lookupds listed",
        )
        node = pnsq_nsqd(tmp_path / "nsqd", f"--lookupd-tcp-address={first.tcp_address}")
        node.start()
        wait_for(lambda: len(_producers(second)) == 1, timeout=20, what="found the other")
        assert len(_producers(first)) == 1  # and not twice with the one it was given
        assert _producers(second)[0]["tcp_port"] == node.tcp_port
    finally:
        if node is not None:
            node.stop()
        second.stop()
        first.stop()
        etcd.stop()


def test_a_lone_lookupd_naming_itself_gets_one_registration(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "l").start()
    node = pnsq_nsqd(tmp_path / "nsqd", f"--lookupd-tcp-address=localhost:{lookupd.tcp_port}")
    try:
        node.start()
        wait_for(lambda: len(_producers(lookupd)) == 1, what="registered")
        listed = get_json(lookupd, "/listlookup")["lookupdnodes"]
        assert [n["TcpPort"] for n in listed] == [str(lookupd.tcp_port)]
        # a /listlookup round (every 5 s) later: still one registration (localhost and the
        # broadcast address 127.0.0.1 are the same lookupd)
        time.sleep(6)
        assert len(_producers(lookupd)) == 1
        assert "names lookupd" not in node.log_text()
    finally:
        node.stop()
        lookupd.stop()
