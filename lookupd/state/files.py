"""Durable writes for lookupd's metadata files (:mod:`.store`, :mod:`.journal`): blocking file
I/O, no Trio. (nsqd has its own, ``nsqd.storage.checkpoint``: the two daemons share no code.)
"""

from __future__ import annotations

import os
from pathlib import Path


def write_all(fd: int, data: bytes, position: int) -> None:
    """``pwrite`` all of ``data`` at ``position``, looping on short writes. Raises ``OSError``."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def fsync_directory(directory: Path) -> None:
    """fsync ``directory``: the creations and renames in it are durable. Raises ``OSError``."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
