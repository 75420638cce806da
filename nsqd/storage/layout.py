"""The file names in a partition log's directory: a segment's ``<base>.log`` and its
``<base>.index``, ``<base>`` being the offset of its first record in 20 zero-padded digits (so
names sort as offsets do)."""

from __future__ import annotations

import re
from typing import Final

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
SEGMENT_NAME: Final = re.compile(r"^(\d{20})\.log$")
INDEX_NAME: Final = re.compile(r"^(\d{20})\.index$")


def segment_stem(base_offset: int) -> str:
    """The file name stem of the segment starting at ``base_offset`` (20 zero-padded digits)."""
    return f"{base_offset:020d}"
