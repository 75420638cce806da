"""A segment's two files and their descriptors, opened on demand within the process's bound.

A segment's ``<base>.log`` and ``<base>.index`` are opened when it is used: read-write, both,
while it is the active segment; the log alone, read-only, once sealed. Open fds are registered
with the process's :class:`~.handles.HandleCache`, which may close them again
(:meth:`SegmentFiles.release`) when too many are open; the next use reopens them. The owning
log serialises access under the lock it passes in (:class:`SegmentEnv`), which is also the lock
the cache takes to close them; nothing here locks.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from .corruption import ReadAt, SkippedRegions
from .handles import HandleCache
from .layout import INDEX_SUFFIX, LOG_SUFFIX, segment_stem

O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


@final
@dataclass(frozen=True, slots=True)
class SegmentEnv:
    """What every segment of one log shares: the index interval, the logger, the process's
    handle cache and the log's lock (held around every use of a segment)."""

    interval: int
    logger: logging.Logger
    handles: HandleCache
    owner: threading.Lock
    skipped: SkippedRegions  # damaged regions that reads and recovery stepped over


class SegmentFiles:
    """The files of the segment starting at ``base_offset`` and their fds (the state a
    :class:`~.segment.Segment` builds on)."""

    def __init__(self, directory: Path, base_offset: int, env: SegmentEnv) -> None:
        stem = segment_stem(base_offset)
        self.base_offset = base_offset
        self.log_path = directory / (stem + LOG_SUFFIX)
        self.index_path = directory / (stem + INDEX_SUFFIX)
        self.active = False  # the last segment of its log: takes appends
        self.fd: int | None = None  # the log fd while open: read-write if active, else read-only
        self.index_fd: int | None = None  # read-write, only while active and open
        self._env = env
        self._logger = env.logger

    def open(self) -> None:
        """Open the fds this segment needs unless they are (active: the read-write log and
        index fds; sealed: a read-only log fd), registered with the handle cache."""
        if self.fd is not None:
            self._env.handles.used(self)
            return
        if not self.active:
            self.fd = os.open(self.log_path, os.O_RDONLY | O_CLOEXEC)
            self._env.handles.opened(self, self._env.owner, 1)
            return
        fd = os.open(self.log_path, os.O_RDWR | O_CLOEXEC)
        try:
            self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT | O_CLOEXEC, 0o644)
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self._env.handles.opened(self, self._env.owner, 2)

    def release(self) -> None:
        """Close the fds (the handle cache's eviction; the owner's lock is held). Nothing is
        lost: appends are in the page cache, and the next sync fsyncs the reopened file."""
        fds = [fd for fd in (self.fd, self.index_fd) if fd is not None]
        self.fd = self.index_fd = None
        for fd in fds:
            try:
                os.close(fd)
            except OSError as exc:  # the fd is gone either way (close(2) on Linux)
                self._logger.warning("segment %s: close failed: %s", self.log_path, exc)

    @contextmanager
    def _reader(self) -> Iterator[ReadAt]:
        """``read_at(size, position)`` of the log file (see :meth:`open`)."""
        self.open()
        assert self.fd is not None
        yield functools.partial(os.pread, self.fd)

    def disown_fds(self) -> None:
        """Forget the fds without closing them: the caller has taken them over."""
        self._env.handles.closed(self)
        self.fd = self.index_fd = None

    def close(self) -> None:
        """Close the fds without syncing them (the caller syncs first)."""
        self._env.handles.closed(self)
        fds = [fd for fd in (self.fd, self.index_fd) if fd is not None]
        self.fd = self.index_fd = None
        for fd in fds:
            os.close(fd)

    def delete(self) -> None:
        """Close and unlink both files (directory fsync is the caller's)."""
        self.close()
        self.log_path.unlink()
        self.index_path.unlink(missing_ok=True)
