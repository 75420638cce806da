"""Saving a partition's state: the whole checkpoint (``state.json``), or, when only channel
cursors moved since the last one, the cursors that moved appended to the partition's cursor
journal (:mod:`nsqd.storage.cursor_journal`): one ``fdatasync`` instead of an atomic rewrite,
so a durable ack (an HTTP consume ack, docs/http-api.md) waits for a shorter sync pass.

The checkpoint carries its generation (``"journal"``); the journal's records carry the
generation they apply on top of, and :func:`apply_journal` replays them when the state is read.
The journal is folded into the next checkpoint written: by a pass nobody waits for (the
``--sync-timeout`` schedule, shutdown: :class:`~.syncing.Syncer`), or when something besides
cursors changed, a channel came or went, or the journal passed :data:`JOURNAL_LIMIT` bytes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from ..core import offset_runs
from ..storage.checkpoint import write_checkpoint
from ..storage.cursor_journal import JOURNAL_FILE, append_record, read_records, reset_journal
from ..storage.errors import StorageError
from .partition import Partition

log = logging.getLogger("nsqd.broker")

JOURNAL_KEY: Final = "journal"  # the checkpoint's generation, in state.json
JOURNAL_LIMIT: Final = 1 << 20  # journal bytes past which the next save is a checkpoint
_COMPACT: Final = (",", ":")

Disk = Callable[..., Awaitable[bool]]
"""``disk(fn, *args)``: run blocking ``fn`` in a worker thread; whether it succeeded (a failure
is logged and makes ``/ping`` unhealthy: :meth:`~nsqd.broker.syncing.Syncer._disk`)."""


def generation_of(state: dict[str, object]) -> int:
    """The generation of a checkpoint read (0: none, or written by an earlier release)."""
    value = state.get(JOURNAL_KEY, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def journal_entry(
    saved: dict[str, object] | None, state: dict[str, object]
) -> dict[str, object] | None:
    """The cursors of ``state`` that differ from ``saved``, if nothing else does (same keys
    and values besides the channels' cursors, the same channels); None otherwise."""
    if saved is None or saved.keys() != state.keys():
        return None
    before, after = saved.get("channels"), state.get("channels")
    if not isinstance(before, dict) or not isinstance(after, dict) or before.keys() != after.keys():
        return None
    if any(saved[key] != state[key] for key in state if key != "channels"):
        return None
    return {name: cursor for name, cursor in after.items() if before[name] != cursor}


async def save_state(
    partition: Partition,
    state: dict[str, object],
    checkpoint: Path,
    disk: Disk,
    *,
    journal: bool = True,
) -> bool:
    """Make ``state`` (:func:`~nsqd.broker.persistence.partition_state`, whose generation is
    the partition's) durable: with ``journal``, a journal record if :func:`journal_entry`
    allows it and the journal is short; else the checkpoint at ``checkpoint`` of the next
    generation (the journal then cut back). Whether it was written
    (``partition.saved_state`` is ``state`` then)."""
    directory = checkpoint.parent
    entry = journal_entry(partition.saved_state, state) if journal else None
    if entry is not None and partition.journal_bytes < JOURNAL_LIMIT:
        payload = json.dumps(entry, separators=_COMPACT).encode()
        size = await _append(disk, directory / JOURNAL_FILE, partition.journal_generation, payload)
        if size is None:
            return False
        partition.journal_bytes = size
    else:
        generation = partition.journal_generation + 1
        state[JOURNAL_KEY] = generation
        if not await disk(write_checkpoint, checkpoint, state):
            return False
        partition.journal_generation = generation
        partition.journal_bytes = 0
        await disk(reset_journal, directory / JOURNAL_FILE)  # a failure: only space is lost
    partition.saved_state = state
    return True


async def _append(disk: Disk, path: Path, generation: int, payload: bytes) -> int | None:
    sizes: list[int] = []

    def append() -> None:
        sizes.append(append_record(path, generation, payload))

    return sizes[0] if await disk(append) else None


def apply_journal(directory: Path, state: dict[str, object]) -> None:
    """Replay ``directory``'s cursor journal into ``state`` (a checkpoint read, its channels
    changed in place): each record of the checkpoint's generation replaces the cursors it
    names. A torn or damaged record ends the replay with a WARNING (the cursors stay at the
    last good one: at-least-once); so does a record of the wrong shape."""
    path = directory / JOURNAL_FILE
    try:
        found = read_records(path, generation_of(state))
    except StorageError as exc:
        log.warning("%s: %s; cursors as of the checkpoint", path, exc)
        return
    problem = found.problem
    channels = state.get("channels")
    for payload in found.payloads if isinstance(channels, dict) else ():
        assert isinstance(channels, dict)
        try:
            entry = json.loads(payload)
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or not all(_valid_cursor(c) for c in entry.values()):
            problem = "a record of the wrong shape"
            break
        channels.update((name, cursor) for name, cursor in entry.items() if name in channels)
    if problem is not None:
        log.warning(
            "%s: %s; cursors as of the last good record (its later FINs come again)", path, problem
        )


def last_generation(directory: Path, state: dict[str, object]) -> int:
    """The highest generation of ``state`` (a checkpoint read) and of the records in
    ``directory``'s cursor journal: the checkpoints written from now on have higher ones, so
    none shares its generation with a record already there."""
    try:
        highest = read_records(directory / JOURNAL_FILE, -1).highest
    except StorageError:
        highest = 0  # unreadable: nothing in it is replayed either
    return max(generation_of(state), highest)


def _valid_cursor(cursor: object) -> bool:
    if not isinstance(cursor, dict):
        return False
    confirmed, acked = cursor.get("confirmed"), cursor.get("acked")
    return (
        isinstance(confirmed, int)
        and confirmed >= 0
        and isinstance(acked, list)
        and all(isinstance(a, int) and a >= 0 for a in acked)
        and offset_runs.valid(cursor.get("runs", []))
    )
