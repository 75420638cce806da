"""lookupd's metadata store: the topic placements and the deleted topics' tombstones, one JSON
file in ``--data-path`` — or nothing at all without ``--data-path`` (as nsqlookupd, which
keeps no state: it starts empty and writes no file; what the nodes register rebuilds it).

Blocking file I/O (the Trio shell calls it from a worker thread). A write is atomic and durable:
a temporary file, fsync, rename over the old file, fsync of the directory — so after a crash the
file holds either the old or the new document, never a mix. The registrations themselves are not
stored: nsqds re-register when they reconnect, and lookupd rebuilds its live view from that.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.placement import TopicPlacement, from_document
from ..core.switches import Switches

log = logging.getLogger("nsqlookupd.store")

FILE_NAME = "nsqlookupd.meta.json"
FORMAT_VERSION = 1


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
    """Placements kept in ``<directory>/nsqlookupd.meta.json``; ``directory=None``: kept in
    memory only (loads nothing, saves nothing)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.path = None if directory is None else directory / FILE_NAME

    def __str__(self) -> str:
        return "memory (no --data-path)" if self.path is None else str(self.path)

    def load(self) -> Stored:
        """Every stored placement and tombstone (none if the file does not exist yet)."""
        if self.path is None:
            return Stored()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Stored()
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc
        try:
            document = json.loads(raw)
            topics = document["topics"]
            deleted = document.get("deleted", {})
            removing = document.get("removing", {})
            return Stored(
                {name: from_document(name, entry) for name, entry in topics.items()},
                {str(name): float(when) for name, when in deleted.items()},
                {str(node): float(when) for node, when in removing.items()},
                Switches.from_values(document.get("switches", {})),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"{self.path} is not a valid metadata file: {exc}") from exc

    def save(
        self,
        placements: Iterable[TopicPlacement],
        deleted: Mapping[str, float] | None = None,
        removing: Mapping[str, float] | None = None,
        switches: Switches | None = None,
    ) -> None:
        """Replace the file with ``placements`` (and tombstones, the nodes being drained and the
        switches), atomically and durably."""
        if self.directory is None or self.path is None:
            return
        # each topic's JSON is made once per placement (TopicPlacement.encoded): a save after
        # a decision encodes what it changed, not every partition; the rest is what
        # json.dumps(..., sort_keys=True, separators=(",", ":")) of the whole would write
        rest = {
            "deleted": dict(sorted((deleted or {}).items())),
            "removing": dict(sorted((removing or {}).items())),
            "switches": (switches or Switches()).to_values(),
        }
        head = json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
        topics = b",".join(
            json.dumps(p.name).encode() + b":" + p.encoded()
            for p in sorted(placements, key=lambda p: p.name)
        )
        data = b"".join((head[:-1], b',"topics":{', topics, b'},"version":%d}\n' % FORMAT_VERSION))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(self.path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc}") from exc
        log.debug("metadata saved to %s", self.path)
