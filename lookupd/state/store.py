"""lookupd's metadata store: the topic placements and the deleted topics' tombstones, in
``--data-path`` — or nothing at all without ``--data-path`` (as nsqlookupd, which keeps no
state: it starts empty and writes no file; what the nodes register rebuilds it).

Blocking file I/O (the Trio shell calls it from a worker thread). Two files:

* the snapshot, ``nsqlookupd.meta.json``: every placement, tombstone, node being drained and
  switch, as one JSON document. Written atomically and durably — a temporary file, fsync,
  rename over the old file, fsync of the directory — so after a crash it holds either the old
  or the new document, never a mix.
* the journal, ``nsqlookupd.meta.journal`` (:mod:`.journal`): each later save's changes,
  appended and ``fdatasync``-ed. A decision that changes one topic writes that topic, not the
  cluster (a snapshot of 10,000 partitions is ~1.5 MB).

A save writes a snapshot instead of a record when the record would be large against the
snapshot (half of it or more: a decision that changes most topics, a node's death) or the
journal would outgrow the snapshot (:data:`JOURNAL_MIN` at least), and when the files are not
as this store last left them (another store object wrote them: its snapshot is read again).
Loading reads the snapshot, then applies the journal's records of its generation.

The registrations themselves are not stored: nsqds re-register when they reconnect, and
lookupd rebuilds its live view from that.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pnsq._fileio import fsync_directory, write_all

from ..core.placement import TopicPlacement, from_document
from ..core.switches import Switches
from . import journal
from .journal import JournalError

log = logging.getLogger("nsqlookupd.store")

FILE_NAME = "nsqlookupd.meta.json"
JOURNAL_NAME = "nsqlookupd.meta.journal"
FORMAT_VERSION = 1
#: the journal may grow to the snapshot's size, and to this much at least
JOURNAL_MIN = 1 << 20


class StoreError(Exception):
    """The metadata file cannot be read (corrupt) or written."""


class UnavailableError(StoreError):
    """HA (etcd) mode: the metadata cannot be written now — etcd is unreachable, or this
    lookupd is not (or no longer) the leader. The HTTP API answers 503."""


@dataclass
class Stored:
    """What the store holds: the placements, and the deleted topics' tombstones (name -> the
    wall time of the deletion) that keep nodes from bringing a deleted topic back."""

    placements: dict[str, TopicPlacement] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    #: nodes being drained (``/cluster/node/remove``): node id -> the wall time it was asked
    removing: dict[str, float] = field(default_factory=dict)
    #: the operator's switches (balancing, rolling upgrade)
    switches: Switches = field(default_factory=Switches)


@dataclass
class _OnDisk:
    """The files as this store last read or wrote them."""

    #: what they hold (the placement objects a save compares with), in dicts of this store's
    #: own: a save's are made from the caller's arguments, a load's copied from what it returns
    stored: Stored
    generation: int  # the snapshot's: its journal's records carry it
    snapshot: tuple[int, int, int]  # the snapshot's inode, mtime (ns) and size
    journal_end: int  # where the journal's last record of the generation ends
    journal_size: int  # the journal's size (more than its end after a crash cut a record)


class MetadataStore:
    """Placements kept in ``<directory>/nsqlookupd.meta.json`` and its journal;
    ``directory=None``: kept in memory only (loads nothing, saves nothing)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.path = None if directory is None else directory / FILE_NAME
        self.journal_path = None if directory is None else directory / JOURNAL_NAME
        self._on_disk: _OnDisk | None = None  # None: not read or written by this object yet

    def __str__(self) -> str:
        return "memory (no --data-path)" if self.path is None else str(self.path)

    def load(self) -> Stored:
        """Every stored placement and tombstone (none if the file does not exist yet)."""
        if self.path is None or self.journal_path is None:
            return Stored()
        try:
            raw = self.path.read_bytes()
            snapshot = _identity(self.path.stat())
        except FileNotFoundError:
            return Stored()
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc
        try:
            document = json.loads(raw)
            stored = Stored(
                {name: from_document(name, entry) for name, entry in document["topics"].items()}
            )
            _take_rest(stored, document)
            generation = int(document.get("journal", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"{self.path} is not a valid metadata file: {exc}") from exc
        try:
            changes = self.journal_path.read_bytes()
        except FileNotFoundError:
            changes = b""
        except OSError as exc:
            raise StoreError(f"cannot read {self.journal_path}: {exc}") from exc
        try:
            records, end = journal.read(changes, generation)
            for record in records:
                for name, entry in record["topics"].items():
                    if entry is None:
                        stored.placements.pop(name, None)
                    else:
                        stored.placements[name] = from_document(name, entry)
                _take_rest(stored, record)
        except (JournalError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"{self.journal_path} is not a valid journal: {exc}") from exc
        if end < len(changes):
            log.warning(
                "%s: %d byte(s) after its last whole record ignored (a save cut short, or "
                "records older than the snapshot)",
                self.journal_path,
                len(changes) - end,
            )
        self._on_disk = _OnDisk(_copy(stored), generation, snapshot, end, len(changes))
        return stored

    def save(
        self,
        placements: Iterable[TopicPlacement],
        deleted: Mapping[str, float] | None = None,
        removing: Mapping[str, float] | None = None,
        switches: Switches | None = None,
    ) -> None:
        """Make ``placements`` (and tombstones, the nodes being drained and the switches) what
        the store holds, durably: a journal record of what changed, or a new snapshot (see the
        module doc)."""
        if self.directory is None:
            return
        new = Stored(
            {p.name: p for p in placements},
            dict(deleted or {}),
            dict(removing or {}),
            switches or Switches(),
        )
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self._append(new):
                self._snapshot(new)
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc}") from exc

    def compact(self) -> None:
        """Fold the journal into a new snapshot, if it holds records (a clean exit: the next
        start reads one file, and a release before the journal reads all that was saved).
        Raises :class:`StoreError`."""
        on_disk = self._on_disk
        if on_disk is None or not on_disk.journal_end:
            return
        try:
            self._snapshot(on_disk.stored)
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc}") from exc

    def _append(self, new: Stored) -> bool:
        """Save ``new`` as a journal record; False when a snapshot is due instead."""
        on_disk = self._on_disk
        if on_disk is None or self.path is None or self.journal_path is None:
            return False
        try:
            snapshot = _identity(self.path.stat())
            journal_size = self.journal_path.stat().st_size
        except FileNotFoundError:
            return False
        if (snapshot, journal_size) != (on_disk.snapshot, on_disk.journal_size):
            return False  # written by someone else since: the snapshot says it all
        old = on_disk.stored
        before = old.placements.get
        topics: dict[str, bytes | None] = {
            name: placement.encoded()
            for name, placement in new.placements.items()
            # a placement is a new object when it changes: the equality is only for one made
            # apart (read back from the file), compared field by field
            if (was := before(name)) is not placement and was != placement
        }
        topics.update(dict.fromkeys(old.placements.keys() - new.placements.keys()))
        rest = {
            key: now
            for key, now, then in (
                ("deleted", new.deleted, old.deleted),
                ("removing", new.removing, old.removing),
                ("switches", new.switches.to_values(), old.switches.to_values()),
            )
            if now != then
        }
        if not topics and not rest:
            return True  # nothing changed
        if sum(len(entry) for entry in topics.values() if entry) * 2 >= snapshot[2]:
            return False  # the record would be larger still (a node's death): not built
        data = journal.record(on_disk.generation, journal.document(topics, rest))
        end = on_disk.journal_end + len(data)
        if len(data) * 2 >= snapshot[2] or end > max(snapshot[2], JOURNAL_MIN):
            return False
        journal.append(self.journal_path, data, on_disk.journal_end)
        on_disk.stored, on_disk.journal_end, on_disk.journal_size = new, end, end
        log.debug("metadata saved to %s (%d topic(s) changed)", self.journal_path, len(topics))
        return True

    def _snapshot(self, new: Stored) -> None:
        """Write ``new`` whole as the snapshot, under a new generation, and empty the journal.
        Raises ``OSError``."""
        assert self.directory is not None
        assert self.path is not None
        assert self.journal_path is not None
        on_disk = self._on_disk
        generation = on_disk.generation + 1 if on_disk is not None else time.time_ns()
        # each topic's JSON is made once per placement (TopicPlacement.encoded): the rest is
        # what json.dumps(..., sort_keys=True, separators=(",", ":")) of the whole would write
        rest = {**_rest_of(new), "journal": generation}
        head = json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
        topics = b",".join(
            json.dumps(name).encode() + b":" + placement.encoded()
            for name, placement in sorted(new.placements.items())
        )
        data = b"".join((head[:-1], b',"topics":{', topics, b'},"version":%d}\n' % FORMAT_VERSION))
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(self.path)
        # only now: until the rename, the journal's records are what the old snapshot lacks
        journal.empty(self.journal_path)
        fsync_directory(self.directory)  # the rename, and the journal's creation
        snapshot = _identity(self.path.stat())
        self._on_disk = _OnDisk(new, generation, snapshot, 0, 0)
        log.debug("metadata saved to %s", self.path)


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    """What tells a file written by someone else: its inode, mtime and size."""
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def _rest_of(stored: Stored) -> dict[str, Any]:
    """The stored form of what is not a placement: tombstones, drains, switches."""
    return {
        "deleted": dict(sorted(stored.deleted.items())),
        "removing": dict(sorted(stored.removing.items())),
        "switches": stored.switches.to_values(),
    }


def _take_rest(stored: Stored, document: Mapping[str, Any]) -> None:
    """``document``'s tombstones, drains and switches (each that it holds) into ``stored``."""
    if "deleted" in document:
        stored.deleted = {str(name): float(when) for name, when in document["deleted"].items()}
    if "removing" in document:
        stored.removing = {str(node): float(when) for node, when in document["removing"].items()}
    if "switches" in document:
        stored.switches = Switches.from_values(document["switches"])


def _copy(stored: Stored) -> Stored:
    """``stored`` in dicts of its own (:meth:`MetadataStore.load` returns its dicts to the
    caller, who changes them)."""
    return Stored(
        dict(stored.placements), dict(stored.deleted), dict(stored.removing), stored.switches
    )
