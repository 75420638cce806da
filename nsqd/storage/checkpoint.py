"""Atomic metadata files (channel cursors, epoch history, high-watermark) and raw-fd helpers.

:func:`atomic_write` is the only way this project writes metadata: the new content is complete
and durable on return, and a crash at any moment leaves either the old or the new file.
Checkpoints (:func:`write_checkpoint`) also keep the generation they replace as
``<name>.prev``, so :func:`load_checkpoint` can fall back on it when the newest one is damaged
(a bad disk block, an operator's editor): the damaged file is moved aside, never deleted, and
never stops the daemon from starting.

A checkpoint is a JSON object whose first member, ``"crc32c"``, is the CRC-32C of the compact
JSON of the rest of it (:func:`checkpoint_bytes`): a flipped byte that still leaves valid JSON
(a digit of a cursor) is damage too, not a cursor moved on past undelivered messages. A file
without it (written by an earlier release) is read as it is, unless its first key is one byte
away from ``"crc32c"`` (damage in that very key). Readers of the JSON that know nothing of the
member (an older release, an operator's ``jq``) see one more key.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import crc32c as _crc32c

from pnsq._fileio import fsync_directory, write_all

from .errors import StorageError

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
CHECKSUM_KEY: Final = "crc32c"  # a checkpoint's first member: CRC-32C of the rest (compact)
_COMPACT: Final = (",", ":")


class DamagedCheckpoints:
    """Checkpoint generations found damaged (moved aside) since the process started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self) -> None:
        with self._lock:
            self.count += 1


#: the process's count (``pnsq_corrupt_checkpoints_total``)
DAMAGED_CHECKPOINTS: Final = DamagedCheckpoints()


def create_directory(directory: Path) -> None:
    """Create ``directory`` and its missing parents, durably: a directory's entry is on disk
    only once its parent is fsynced, as a file's (a partition's directory created in a new
    topic's, its records fsynced, could otherwise vanish with the machine). A directory
    another thread created meanwhile counts as created here: its parent is fsynced too."""
    create_directories([directory])


def create_directories(directories: Iterable[Path]) -> set[Path]:
    """:func:`create_directory` of each of ``directories``, each parent fsynced once for all
    the entries made in it (a new topic's partitions: one fsync of the topic's directory, not
    one per partition); returns those of ``directories`` that were missing (made here, or by
    another thread meanwhile)."""
    made: set[Path] = set()
    parents: dict[Path, None] = {}  # in the order made (a dict: no parent twice)
    for directory in directories:
        missing = []
        path = directory
        while not path.is_dir():
            missing.append(path)
            path = path.parent
        if missing:
            made.add(directory)
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir()
            parents[path.parent] = None
    for parent in parents:
        fsync_directory(parent)
    return made


def atomic_write(path: Path, data: bytes, *, keep_previous: bool = False) -> None:
    """Replace ``path`` with ``data``; durable on return.

    Writes a temporary file in the same directory, fsyncs it, renames it over ``path`` and
    fsyncs the directory. On failure the temporary file is removed and :class:`StorageError`
    raised; ``path`` then holds its old content (or nothing, if it did not exist). With
    ``keep_previous`` the old content is first renamed to :func:`previous_path` (a crash
    between the two renames leaves only that one, which :func:`load_checkpoint` reads).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
        try:
            write_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        if keep_previous:
            with contextlib.suppress(FileNotFoundError):  # the first generation
                path.replace(previous_path(path))
        tmp.replace(path)
        fsync_directory(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc}") from exc


def read_json(path: Path) -> object | None:
    """The JSON value stored at ``path``, or None if the file does not exist.

    Raises :class:`StorageError` if the file cannot be read or is not valid JSON (it was not
    written by :func:`write_json`, since that never leaves a partial file).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        value: object = json.loads(data)
    except ValueError as exc:
        raise StorageError(f"{path} is not valid JSON: {exc}") from exc
    return value


def write_json(path: Path, value: object) -> None:
    """:func:`atomic_write` ``value`` as compact JSON; durable on return."""
    atomic_write(path, json.dumps(value, separators=(",", ":")).encode())


def previous_path(path: Path) -> Path:
    """Where :func:`write_checkpoint` keeps the generation it replaced."""
    return path.with_name(path.name + ".prev")


def _crc_of(value: dict[str, object]) -> int:
    return int(_crc32c.crc32c(json.dumps(value, separators=_COMPACT).encode()))


def checkpoint_bytes(value: object) -> bytes:
    """The file content of checkpoint ``value``: compact JSON, for an object with its checksum
    first (see the module doc)."""
    if isinstance(value, dict):
        value = {CHECKSUM_KEY: _crc_of(value), **value}
    return json.dumps(value, separators=_COMPACT).encode()


def checked_value(value: object) -> object:
    """A checkpoint's content without its checksum; raises :class:`StorageError` when the
    checksum does not match (or damage hit the checksum's own key)."""
    if not isinstance(value, dict):
        return value
    if CHECKSUM_KEY not in value:
        first = next(iter(value), "")
        if len(first) == len(CHECKSUM_KEY) and sum(map(str.__ne__, first, CHECKSUM_KEY)) == 1:
            raise StorageError(f"damaged checksum key {first!r}")
        return value  # written before checkpoints had a checksum
    stored = value.pop(CHECKSUM_KEY)
    if not isinstance(stored, int) or isinstance(stored, bool) or stored != _crc_of(value):
        raise StorageError(f"checksum mismatch (stored {stored!r})")
    return value


def write_checkpoint(path: Path, value: object) -> None:
    """:func:`atomic_write` of :func:`checkpoint_bytes` that keeps the replaced generation at
    :func:`previous_path`."""
    atomic_write(path, checkpoint_bytes(value), keep_previous=True)


def load_checkpoint(
    path: Path,
    valid: Callable[[object], bool],
    stamp: str,
    logger: logging.Logger,
    fallback: str,
) -> object | None:
    """The newest good generation of the checkpoint at ``path``; None if there is none.

    A generation that cannot be read, is not JSON, fails its checksum or ``valid`` is
    renamed to
    ``<name>.corrupt-<stamp>`` with an ERROR on ``logger``, and the previous generation is
    tried; falling back on it is logged at WARNING. If every generation was damaged, an ERROR
    says so and what happens instead (``fallback``). Raises :class:`StorageError` only if a
    damaged file cannot even be moved aside.
    """
    damaged = False
    for candidate in (path, previous_path(path)):
        try:
            value = read_json(candidate)
            value = None if value is None else checked_value(value)
        except StorageError as exc:
            problem = str(exc) if str(candidate) in str(exc) else f"{candidate}: {exc}"
        else:
            if value is None:
                continue
            if valid(value):
                if candidate != path:
                    logger.warning("%s: using the previous checkpoint %s", path, candidate.name)
                return value
            problem = f"{candidate} does not hold a valid checkpoint"
        aside = candidate.with_name(f"{candidate.name}.corrupt-{stamp}")
        try:
            candidate.replace(aside)
        except OSError as exc:
            raise StorageError(f"{problem}; cannot move it aside: {exc}") from exc
        logger.error("%s; moved it aside to %s", problem, aside.name)
        DAMAGED_CHECKPOINTS.add()
        damaged = True
    if damaged:
        logger.error("%s: no good checkpoint left; %s", path, fallback)
    return None
