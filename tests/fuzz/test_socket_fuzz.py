"""The socket fuzzer against a real pnsq nsqd: mutated recorded sessions (pynsq, go-nsq, youzan
handshakes; TCP and HTTP) from concurrent connections, then the after-checks of
:func:`tests.fuzz.run.fuzz`.

The default run is bounded by an input count and a time budget, whichever comes first
(``PNSQ_FUZZ_INPUTS``, default 100,000; ``PNSQ_FUZZ_SECONDS``, default 30): nsqd handles about
1,000 inputs/s on one core here, so the budget is what ends it on a small machine. The inputs
are the same sequence on every run (``PNSQ_FUZZ_SEED``, default 1). A run that sends nothing
useful must not pass, so the replies are checked too: many distinct error codes, OK replies,
delivered messages, HTTP 200s and 400s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.daemons import pnsq_nsqd
from tests.fuzz.mutate import load_corpus
from tests.fuzz.run import fuzz, iter_inputs, prime, raise_nofile

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, inputs: int, seconds: float, seed: int) -> None:
    raise_nofile()
    nsqd = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        prime(nsqd, load_corpus())
        report = fuzz(
            nsqd, iter_inputs(seed), inputs, seconds, connections=32, save=tmp_path / "failures"
        )
    finally:
        nsqd.stop()
    print("\n".join(report.lines()))
    stats = report.stats
    # it came through whole
    assert not report.crashed, report.lines()
    assert stats.hangs == [], report.saved
    assert report.tracebacks == 0, nsqd.log_text()[-5000:]
    assert report.leaked_sockets == 0
    assert report.clients_after == 0
    assert report.round_trip

    # and the inputs reached the server and the server worked on it
    assert stats.inputs >= min(inputs, 2000)
    assert stats.bytes_sent > 100 * stats.inputs
    assert set(stats.endings) == {"shut", "reset", "reset-early"}
    assert {"E_INVALID", "E_BAD_BODY", "E_BAD_PROTOCOL", "E_BAD_MESSAGE"} <= set(stats.error_codes)
    assert len(stats.error_codes) >= 8
    assert stats.ok_frames > 0
    assert stats.message_frames > 0
    assert {"200", "400"} <= set(stats.http_statuses)


def test_socket_fuzz(tmp_path: Path) -> None:
    _run(
        tmp_path,
        int(os.environ.get("PNSQ_FUZZ_INPUTS", "100000")),
        float(os.environ.get("PNSQ_FUZZ_SECONDS", "30")),
        int(os.environ.get("PNSQ_FUZZ_SEED", "1")),
    )


@pytest.mark.slow
@pytest.mark.timeout(2100)  # a 1800 s budget, then the descriptor and task checks
@pytest.mark.parametrize("seed", [2, 3])
def test_socket_fuzz_soak(tmp_path: Path, seed: int) -> None:
    _run(tmp_path, 1_000_000, 1800, seed)
