"""lookupd's metadata store: the topic placements and the deleted topics' tombstones, as JSON
files in ``--data-path`` — or nothing at all without ``--data-path`` (as nsqlookupd, which
keeps no state: it starts empty and writes no file; what the nodes register rebuilds it).

Layout: ``nsqlookupd.meta.json`` holds the tombstones, the nodes being drained and the
switches; each topic's placement is a file of its own, ``nsqlookupd.topics/<topic>.json``. A
save writes the topics whose placement changed since the last one (a decision touches a few
topics; rewriting every placement made its cost grow with the cluster) and the head only when
it changed, then removes the files of topics no longer placed.

Blocking file I/O (the Trio shell calls it from a worker thread). Each file is written
atomically and durably: a temporary file, fsync, rename over the old one, fsync of its
directory. A save of several files is not one atomic step — as the etcd store's, whose
transactions hold up to 60 keys each — and needs not be: each topic's placement stands alone,
and a save is told to the nodes only once it is complete. A crash mid-save leaves each file old
or new: topics written first, then the head, then the files of removed topics unlinked, so a
deleted topic's tombstone is on disk before its file goes; a file left beside its tombstone
is not loaded. The file of the release before (one JSON document with every topic in it) is
read as it was, and the first save writes this layout. The registrations themselves are not
stored: nsqds re-register when they reconnect, and lookupd rebuilds its live view from that.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from protocol.names import is_valid_topic_name

from ..core.placement import TopicPlacement, from_document
from ..core.switches import Switches

log = logging.getLogger("nsqlookupd.store")

FILE_NAME = "nsqlookupd.meta.json"
#: each topic's placement, ``<name>.json`` (a topic name is a file name: NSQ's name rules)
TOPICS_DIR = "nsqlookupd.topics"
#: 2: topics in files of their own; 1 (the release before): every topic in FILE_NAME
FORMAT_VERSION = 2


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


class MetadataStore:
    """Placements kept in ``<directory>`` (the module doc's layout); ``directory=None``: kept in
    memory only (loads nothing, saves nothing)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.path = None if directory is None else directory / FILE_NAME
        self.topics = None if directory is None else directory / TOPICS_DIR
        #: what the files hold now, as last loaded or saved (None: not known yet): the
        #: placement object of each topic file (a placement never changes: a change is a new
        #: object), and the head's bytes
        self._written: dict[str, TopicPlacement] | None = None
        self._head: bytes | None = None

    def __str__(self) -> str:
        return "memory (no --data-path)" if self.path is None else str(self.path)

    def load(self) -> Stored:
        """Every stored placement and tombstone (none if nothing was saved yet)."""
        if self.path is None or self.topics is None:
            return Stored()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = None
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc
        try:
            document = json.loads(raw) if raw is not None else {}
            # the release before kept every topic here; topic files are newer (a save of this
            # layout that stopped before its head)
            topics = {
                name: from_document(name, entry)
                for name, entry in document.get("topics", {}).items()
            }
            deleted = {str(name): float(when) for name, when in document.get("deleted", {}).items()}
            stored = Stored(
                topics,
                deleted,
                {str(node): float(when) for node, when in document.get("removing", {}).items()},
                Switches.from_values(document.get("switches", {})),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"{self.path} is not a valid metadata file: {exc}") from exc
        files = self._read_topics()
        stored.placements.update(files)
        for name in deleted:  # deleted after its file was written: the file goes next save
            stored.placements.pop(name, None)
        self._written = files
        # a head of the release before (topics in it) is rewritten by the next save
        self._head = raw if raw is not None and "topics" not in document else None
        return stored

    def _read_topics(self) -> dict[str, TopicPlacement]:
        """Every topic file's placement."""
        assert self.topics is not None
        try:
            paths = [path for path in self.topics.iterdir() if path.suffix == ".json"]
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError(f"cannot read {self.topics}: {exc}") from exc
        placements: dict[str, TopicPlacement] = {}
        for path in paths:
            name = path.name[: -len(".json")]
            try:
                placements[name] = from_document(name, json.loads(path.read_bytes()))
            except OSError as exc:
                raise StoreError(f"cannot read {path}: {exc}") from exc
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise StoreError(f"{path} is not a valid topic placement: {exc}") from exc
        return placements

    def save(
        self,
        placements: Iterable[TopicPlacement],
        deleted: Mapping[str, float] | None = None,
        removing: Mapping[str, float] | None = None,
        switches: Switches | None = None,
    ) -> None:
        """Store ``placements`` (and tombstones, the nodes being drained and the switches) in
        place of what the files hold, durably: the changed topics' files, the head if it
        changed, then the removed topics' files unlinked (the module doc)."""
        if self.directory is None or self.path is None or self.topics is None:
            return
        head = json.dumps(
            {
                "deleted": dict(sorted((deleted or {}).items())),
                "removing": dict(sorted((removing or {}).items())),
                "switches": (switches or Switches()).to_values(),
                "version": FORMAT_VERSION,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        wanted = {placement.name: placement for placement in placements}
        try:
            self.topics.mkdir(parents=True, exist_ok=True)
            written = self._written if self._written is not None else self._read_topics()
            changed = [p for name, p in wanted.items() if written.get(name) is not p]
            for placement in changed:
                if not is_valid_topic_name(placement.name):
                    raise StoreError(f"topic {placement.name!r}: not a name to store")
                _write_file(self.topics / f"{placement.name}.json", placement.encoded())
            if changed:
                fsync_directory(self.topics)
            if head != self._head:
                _write_file(self.path, head + b"\n")
                fsync_directory(self.directory)
                self._head = head
            gone = [name for name in written if name not in wanted]
            for name in gone:
                (self.topics / f"{name}.json").unlink(missing_ok=True)
            if gone:
                fsync_directory(self.topics)
        except OSError as exc:
            self._written = None  # read again by the next save: what was written is unknown
            raise StoreError(f"cannot write {self.path}: {exc}") from exc
        self._written = wanted
        log.debug("metadata saved to %s (%d topic(s) written)", self.directory, len(changed))


def _write_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a temporary file, fsync, rename (the caller
    fsyncs the directory)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)


def fsync_directory(directory: Path) -> None:
    """Make the renames and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
