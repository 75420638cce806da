"""What a partition log's next sync must make durable, and the fsyncs that do it.

Appends land in the OS page cache. A sync fsyncs the active segment's log and index files, the
files of segments rotated out since the last sync (then closes them) and, after a segment file
was created, the directory. :class:`~.log.PartitionLog` takes that work under its lock
(:meth:`PendingSync.take`) and runs the fsyncs without it (:meth:`PendingSync.run`), so the
event-loop thread goes on appending and reading while a worker thread syncs.
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from pathlib import Path
from typing import final

from pnsq._fileio import fsync_directory

from .errors import StorageError
from .segment import Segment


@final
class PendingSync:
    """The unsynced state of one log directory (guarded by the log's lock)."""

    def __init__(self, directory: Path, lock: threading.Lock) -> None:
        self.directory = directory
        self._lock = lock
        self.rotated: list[int] = []  # fds of segments rotated out since the last sync
        self.dir_dirty = False  # a segment file was created since the last sync

    def take_rotated(self) -> list[int]:
        """The rotated-out fds, now the caller's to fsync and close."""
        fds, self.rotated = self.rotated, []
        return fds

    def take(self, active: Segment) -> tuple[list[int], bool]:
        """Under the lock: the fds to fsync and close, and whether the directory needs one."""
        fds = self.take_rotated()
        try:
            # Reopened if the handle cache closed it: fsync of any fd flushes the file's pages.
            active.open()
            assert active.fd is not None
            assert active.index_fd is not None
            # Duplicates, so that truncate()/close() on another thread may close the originals.
            fds.append(os.dup(active.fd))
            fds.append(os.dup(active.index_fd))
        except OSError:
            self.rotated = fds
            raise
        dir_dirty, self.dir_dirty = self.dir_dirty, False
        return fds, dir_dirty

    def take_closing(self, active: Segment) -> tuple[list[int], list[OSError]]:
        """Under the lock, as the log closes: the fds to fsync and close (the active segment's
        own, which it gives up, reopened if the handle cache closed them so that what was
        written since the last sync is fsynced), and the error reopening raised, if any."""
        errors: list[OSError] = []
        try:
            active.open()
        except OSError as exc:
            errors.append(exc)
        fds = self.take_rotated()
        fds.extend(fd for fd in (active.fd, active.index_fd) if fd is not None)
        active.disown_fds()
        return fds, errors

    def run(self, fds: list[int], dir_dirty: bool) -> None:
        """Without the lock: fsync ``fds`` (then close them) and the directory."""
        error: OSError | None = None
        try:
            for fd in fds:
                os.fsync(fd)
            if dir_dirty:
                fsync_directory(self.directory)
        except OSError as exc:
            error = exc
            if dir_dirty:
                with self._lock:
                    self.dir_dirty = True
        for fd in fds:
            try:
                os.close(fd)
            except OSError as exc:
                error = error or exc
        if error is not None:
            # After a failed fsync the page cache state is unknown (fsyncgate): callers must
            # treat the data since the last good sync as lost, not retry and assume success.
            raise StorageError(f"sync of {self.directory} failed: {error}") from error

    def discard(self) -> None:
        """Close the rotated-out fds without syncing them (the log is being abandoned)."""
        for fd in self.take_rotated():
            with suppress(OSError):
                os.close(fd)
