"""The daemon's glibc allocator settings: megabyte blocks freed and made again are not faulted
in afresh each time (counted page faults, not time)."""

from __future__ import annotations

import subprocess
import sys

from nsqd.allocator import tune_malloc

# A 1 MB message's short-lived blocks, many times over, in a fresh interpreter (the allocator's
# state is per process); prints the minor page faults the loop took.
_CHURN = """
import resource, sys
if sys.argv[1] == "tuned":
    from nsqd.allocator import tune_malloc
    assert tune_malloc()
blocks = []
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    blocks = [bytes([i % 256]) * 1_000_000 for _ in range(4)]
    del blocks
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], check=True, capture_output=True, text=True
    )
    return int(out.stdout)


def test_megabyte_blocks_are_reused_rather_than_faulted_in_again() -> None:
    assert tune_malloc()  # glibc on the machines the tests run on
    default, tuned = _faults("default"), _faults("tuned")
    # 200 rounds of 4 MB: ~200,000 faults when the heap is given back each round
    assert default > 50_000
    assert tuned < default // 10
