"""Blocking file I/O both daemons' storage uses (nsqd's partition logs and checkpoints,
lookupd's metadata snapshot and journal): writes that loop on short ``pwrite``\\ s, whole-file
reads, and the directory fsync that makes creations and renames durable. Standard library only,
no Trio: the callers run them in worker threads or where blocking is the design.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["fsync_directory", "read_all", "write_all"]

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def write_all(fd: int, data: bytes, position: int) -> None:
    """``pwrite`` all of ``data`` at ``position``, looping on short writes. Raises ``OSError``."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def read_all(fd: int) -> bytes:
    """The whole content of the file behind ``fd`` (``pread`` from 0). Raises ``OSError``."""
    parts = []
    position = 0
    while data := os.pread(fd, 1 << 20, position):
        parts.append(data)
        position += len(data)
    return b"".join(parts)


def fsync_directory(directory: Path) -> None:
    """fsync ``directory`` so file creations, renames and unlinks in it are durable. Raises
    ``OSError``."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
