"""The daemon's glibc allocator settings: a megabyte block comes from the heap (kept and reused
after it is freed), not from a mapping of its own that is returned to the system on free."""

from __future__ import annotations

import subprocess
import sys

from nsqd.allocator import tune_malloc

# In a fresh interpreter (the allocator's state is per process): the bytes glibc holds in
# mappings of their own (mallinfo2's hblkhd) grow by a new 2 MB block, or not.
_MAPPED = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    from nsqd.allocator import tune_malloc
    assert tune_malloc()
before = libc.mallinfo2().hblkhd
block = bytes(2_000_000)
print(libc.mallinfo2().hblkhd - before)
"""


def _mapped(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _MAPPED, mode], check=True, capture_output=True, text=True
    )
    return int(out.stdout)


def test_megabyte_blocks_come_from_the_heap_once_tuned() -> None:
    assert tune_malloc()  # glibc on the machines the tests run on
    assert _mapped("default") >= 2_000_000  # glibc's default: a mapping of its own
    assert _mapped("tuned") == 0  # tuned: from the heap, kept for the next one when freed
