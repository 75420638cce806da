"""The socket fuzzer on the cluster links (:mod:`tests.fuzz.cluster`): mutated ``"  R1"``
openings to a cluster nsqd and mutated ``"  V1"`` openings to its lookupd, with and without the
cluster handshake, against a cluster that holds the secret and one that does not. Each daemon
must come through whole and keep working; with the secret no mutated input registers anything
or follows anything.

Bounded by ``PNSQ_FUZZ_CLUSTER_INPUTS`` (default 10,000 per link) and
``PNSQ_FUZZ_CLUSTER_SECONDS`` (default 8 per link), same sequence every run
(``PNSQ_FUZZ_SEED``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.lookup_v1 import MAGIC_V1
from protocol.replication import MAGIC as MAGIC_R1
from tests.daemons import cluster_secret_flag, pnsq_lookupd, pnsq_nsqd
from tests.fuzz.cluster import cluster_seeds, fuzz_lookupd, inputs
from tests.fuzz.run import fuzz, raise_nofile
from tests.integration.lookupd_helpers import get_json, wait_for

pytestmark = pytest.mark.integration

SECRET = "fuzz cluster secret"
LIMIT = int(os.environ.get("PNSQ_FUZZ_CLUSTER_INPUTS", "10000"))
SECONDS = float(os.environ.get("PNSQ_FUZZ_CLUSTER_SECONDS", "8"))
SEED = int(os.environ.get("PNSQ_FUZZ_SEED", "1"))


@pytest.mark.parametrize("secured", [True, False], ids=["secret", "no-secret"])
def test_cluster_links_fuzz(tmp_path: Path, secured: bool) -> None:
    raise_nofile()
    flags = (cluster_secret_flag(tmp_path / "secret", SECRET),) if secured else ()
    lookupd = pnsq_lookupd(tmp_path / "lookupd", *flags).start()
    node = pnsq_nsqd(tmp_path / "node", f"--lookupd-tcp-address={lookupd.tcp_address}", *flags)
    try:
        node.start()
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], what="the node registered")
        seeds = cluster_seeds(MAGIC_R1, SECRET.encode())
        r1 = fuzz(node, inputs(seeds, SEED), LIMIT, SECONDS, 32, tmp_path / "failures")
        print("\n".join(r1.lines()))
        assert not r1.crashed, r1.lines()
        assert r1.stats.hangs == [], r1.saved
        assert r1.tracebacks == 0, node.log_text()[-5000:]
        assert r1.leaked_sockets == 0
        assert r1.clients_after == 0
        assert r1.round_trip
        assert r1.stats.inputs >= min(LIMIT, 300)
        assert r1.stats.bytes_received > 0  # refusals and replication errors came back

        seeds = cluster_seeds(MAGIC_V1, SECRET.encode())
        v1 = fuzz_lookupd(lookupd, inputs(seeds, SEED), LIMIT, SECONDS)
        assert not v1.crashed, v1
        assert v1.stats.hangs == []
        assert v1.tracebacks == 0, lookupd.log_text()[-5000:]
        assert v1.leaked_sockets == 0
        assert v1.stats.inputs >= min(LIMIT, 300)
        assert v1.stats.bytes_received > 0
        # the real node is still registered, and it is the only one left
        producers = get_json(lookupd, "/nodes")["producers"]
        assert [p["tcp_port"] for p in producers] == [node.tcp_port]
        # the inputs reached the handshake (or, without a secret, the refusal of one)
        if secured:  # and no mutated input ever got through it
            assert "cluster handshake with 127.0.0.1 failed" in node.log_text()
            assert "cluster handshake with 127.0.0.1 failed" in lookupd.log_text()
            assert "proved the cluster credential as 127.0.0.1:4150" not in lookupd.log_text()
        else:
            assert "holds no cluster secret" in lookupd.log_text()
    finally:
        node.stop()
        lookupd.stop()
