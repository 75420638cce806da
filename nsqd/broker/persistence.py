"""What the broker writes to disk besides the logs, and the fsync group-commit schedule.

* ``pnsq.dat``: topics (partitions, paused, youzan's ordered and ext flags) and their channels
  (paused, ordered), one JSON document per node;
* ``state.json`` per partition: channel cursors and where a topic's first channel starts;
* :class:`SyncSchedule`: publishers that need a durable ack wait for one fsync generation that
  started after their append; every waiter of that moment shares it (group commit).
"""

from __future__ import annotations

from pathlib import Path

import trio

from ..storage.checkpoint import read_json
from .partition import Partition
from .topic import Topic

METADATA_FILE = "pnsq.dat"
STATE_FILE = "state.json"
TOPIC_DIR_PREFIX = "t-"  # topic names may be "." or "..": never use one bare as a path


class SyncSchedule:
    """fsync bookkeeping: requests, generations and the waiters of the next one."""

    def __init__(self) -> None:
        self.wanted = trio.Event()
        self.metadata_dirty = False
        self._started = 0
        self._done = 0
        self._done_event = trio.Event()

    def request(self, *, metadata: bool = False) -> None:
        """Ask for a sync soon (and a metadata save with it)."""
        self.metadata_dirty |= metadata
        self.wanted.set()

    async def wait_durable(self) -> None:
        """Wait for a sync that starts after this call."""
        target = self._started + 1
        self.wanted.set()
        while self._done < target:
            await self._done_event.wait()

    async def wait_requested(self, interval: float) -> None:
        """Until a sync is requested or ``interval`` passes (--sync-timeout); then re-arm."""
        with trio.move_on_after(interval):
            await self.wanted.wait()
        self.wanted = trio.Event()

    def begin(self) -> int:
        """A sync starts: its generation number."""
        self._started += 1
        return self._started

    def end(self, generation: int) -> None:
        """A sync finished: wake everybody waiting for it."""
        self._done = generation
        done, self._done_event = self._done_event, trio.Event()
        done.set()


def topic_directory(data_path: Path, name: str) -> Path:
    """Where the partitions of topic ``name`` live."""
    return data_path / "topics" / f"{TOPIC_DIR_PREFIX}{name}"


def load_topic_entries(data_path: Path) -> dict[str, dict[str, object]]:
    """Topics from ``pnsq.dat``, plus topic directories created just before a crash."""
    meta = read_json(data_path / METADATA_FILE)
    entries: dict[str, dict[str, object]] = {}
    if isinstance(meta, dict):
        for entry in meta.get("topics", []):
            entries[str(entry["name"])] = entry
    topics_dir = data_path / "topics"
    if topics_dir.is_dir():
        for path in sorted(topics_dir.iterdir()):
            name = path.name.removeprefix(TOPIC_DIR_PREFIX)
            if path.name.startswith(TOPIC_DIR_PREFIX) and name not in entries:
                found = sum(1 for p in path.iterdir() if p.name.isdigit())
                entries[name] = {"name": name, "partitions": max(found, 1), "channels": []}
    return entries


def metadata_document(topics: list[Topic], version: str) -> dict[str, object]:
    """The ``pnsq.dat`` document: durable topics and channels (never #ephemeral ones)."""
    out = []
    for topic in topics:
        if topic.ephemeral:
            continue
        channels = [
            {"name": c.name, "paused": c.paused, "ordered": c.ordered}
            for c in topic.channels.values()
            if not c.ephemeral
        ]
        out.append(
            {
                "name": topic.name,
                "paused": topic.paused,
                "partitions": len(topic.partitions),
                "ordered": topic.ordered,
                "ext": topic.ext,
                "channels": channels,
            }
        )
    return {"version": version, "topics": out}


def partition_state(topic: Topic, partition: Partition) -> dict[str, object]:
    """The ``state.json`` document of one partition."""
    channels = {
        c.name: c.cursors[partition.number].checkpoint()
        for c in topic.channels.values()
        if not c.ephemeral
    }
    return {"topic_start": partition.topic_start, "channels": channels}


def load_state(directory: Path | None) -> dict[str, object]:
    """A partition's ``state.json`` ({} if missing or for in-memory partitions)."""
    if directory is None:
        return {}
    state = read_json(directory / STATE_FILE)
    return state if isinstance(state, dict) else {}
