"""What the broker writes to disk besides the logs, and the fsync group-commit schedule.

* ``pnsq.dat``: topics (partitions, paused, youzan's ordered and ext flags) and their channels
  (paused, ordered, youzan's skipped and skip_zan_test), one JSON document per node;
* ``state.json`` per partition: channel cursors and where a topic's first channel starts;
* both are checkpoints that keep their previous generation: a damaged one is moved aside at
  start and the previous one used, else a channel resumes at the earliest retained offset
  (at-least-once: a damaged checkpoint redelivers, it never skips to the tail);
* :class:`SyncSchedule`: publishers that need a durable ack wait for one fsync generation that
  started after their append; every waiter of that moment shares it (group commit).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import trio

from ..core import offset_runs
from ..core.ownership import Placement, Role
from ..storage.checkpoint import load_checkpoint
from . import idempotence
from .channel import Channel
from .journaling import JOURNAL_KEY, apply_journal
from .partition import Partition
from .topic import Topic

METADATA_FILE = "pnsq.dat"
STATE_FILE = "state.json"
TOPIC_DIR_PREFIX = "t-"  # topic names may be "." or "..": never use one bare as a path

log = logging.getLogger("nsqd.broker")


class SyncSchedule:
    """fsync bookkeeping: requests, generations and the waiters of the next one."""

    def __init__(self) -> None:
        self.wanted = trio.Event()
        self.metadata_dirty = False
        #: somebody waits for the next pass (:meth:`wait_durable`): cursor moves may go to the
        #: cursor journal (:mod:`.journaling`); the pass reads and clears it as it begins
        self.awaited = False
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
        self.awaited = True
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


def file_stamp() -> str:
    """The UTC time in the name of a damaged file moved aside (``...corrupt-<stamp>``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def topic_directory(data_path: Path, name: str) -> Path:
    """Where the partitions of topic ``name`` live."""
    return data_path / "topics" / f"{TOPIC_DIR_PREFIX}{name}"


def load_topic_entries(data_path: Path, stamp: str) -> dict[str, dict[str, object]]:
    """Topics from ``pnsq.dat``, plus topic directories created just before a crash (or all
    of them, without channel flags, if no generation of ``pnsq.dat`` is readable).

    ``stamp`` names a damaged file moved aside (``pnsq.dat.corrupt-<stamp>``).
    """
    meta = load_checkpoint(
        data_path / METADATA_FILE,
        valid_metadata,
        stamp,
        log,
        "topics restored from their directories, channels from their cursors",
    )
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
        channels = [channel_document(c) for c in topic.channels.values() if not c.ephemeral]
        entry: dict[str, object] = {
            "name": topic.name,
            "paused": topic.paused,
            "partitions": topic.partition_num,
            "ordered": topic.ordered,
            "ext": topic.ext,
            "channels": channels,
        }
        if topic.managed:
            entry["meta"] = {
                "channel_auto_create": topic.channel_auto_create,
                "retention": topic.retention,
                "sync_every": topic.sync_every,
                "min_isr": topic.min_isr,
                "topic_id": topic.topic_id,
            }
            entry["held"] = {
                str(p.number): placement_document(p.state.placement) for p in topic.partitions
            }
        out.append(entry)
    return {"version": version, "topics": out}


def channel_document(channel: Channel) -> dict[str, object]:
    """A channel's flags in ``pnsq.dat`` (youzan's skip flags written since they are kept;
    an entry without them means False)."""
    return {
        "name": channel.name,
        "paused": channel.paused,
        "ordered": channel.ordered,
        "skipped": channel.skipped,
        "skip_zan_test": channel.skip_zan_test,
    }


def restore_channel_flags(channel: Channel, entry: dict[str, object]) -> None:
    """Set ``channel``'s flags from its :func:`channel_document` (missing keys: False; the
    topic's ``ordered`` flag orders every channel)."""
    channel.paused = bool(entry.get("paused", False))
    channel.ordered = bool(entry.get("ordered", False)) or channel.topic.ordered
    channel.skipped = bool(entry.get("skipped", False))
    channel.skip_zan_test = bool(entry.get("skip_zan_test", False))


def placement_document(placement: Placement) -> dict[str, object]:
    """A held partition's placement in ``pnsq.dat`` (what lookupd last said about it)."""
    return {
        "role": placement.role.value,
        "epoch": placement.epoch,
        "leader": placement.leader,
        "replicas": list(placement.replicas),
        "isr": list(placement.isr),
    }


def held_placements(entry: dict[str, object]) -> dict[int, Placement] | None:
    """The partitions a topic entry of ``pnsq.dat`` holds here, or None if it is not placed by
    lookupd (standalone: every partition, led)."""
    held = entry.get("held")
    if not isinstance(held, dict):
        return None
    return {
        int(number): Placement(
            Role(doc["role"]),
            int(doc["epoch"]),
            str(doc["leader"]),
            tuple(doc["replicas"]),
            tuple(doc.get("isr", ())),  # written since the in-sync set is kept
        )
        for number, doc in held.items()
    }


def partition_state(topic: Topic, partition: Partition) -> dict[str, object]:
    """The ``state.json`` document of one partition."""
    channels = {
        c.name: c.cursors[partition.number].checkpoint()
        for c in topic.channels.values()
        if not c.ephemeral
    }
    return {
        "topic_start": partition.topic_start,
        "channels": channels,
        "producers": idempotence.checkpoint(partition),
        JOURNAL_KEY: partition.journal_generation,
    }


#: a channel's cursor in a partition that has delivered nothing
_NEW_CURSOR: dict[str, object] = {"confirmed": 0, "acked": []}


def as_new(state: dict[str, object]) -> bool:
    """Whether ``state`` (:func:`partition_state`) is what a partition restores to with no
    ``state.json`` at all (:func:`load_state`'s ``{}``; its log's producer stamps read back
    from its start): a partition created empty needs none written until it differs (a
    node given thousands of new partitions wrote and fsynced one each)."""
    channels = state.get("channels")
    return (
        state.get("topic_start") == 0
        and state.get("producers") == {"end": 0, "rows": []}
        and state.get(JOURNAL_KEY) == 0
        and isinstance(channels, dict)
        and all(cursor == _NEW_CURSOR for cursor in channels.values())
    )


def load_state(directory: Path, stamp: str) -> dict[str, object]:
    """A partition's ``state.json``, or its previous generation if it is damaged; ``{}`` if
    there is none (every channel then starts at the earliest retained offset); with the
    cursors its cursor journal moved since (:func:`~.journaling.apply_journal`)."""
    fallback = "its channels resume at the earliest retained offset"
    state = load_checkpoint(directory / STATE_FILE, valid_state, stamp, log, fallback)
    state = state if isinstance(state, dict) else {}
    apply_journal(directory, state)
    return state


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def valid_state(value: object) -> bool:
    """Whether ``value`` has the shape :func:`partition_state` writes."""
    if not isinstance(value, dict) or not _is_int(value.get("topic_start", 0)):
        return False
    channels = value.get("channels", {})
    if not isinstance(channels, dict):
        return False
    for cursor in channels.values():
        if not isinstance(cursor, dict) or not _is_int(cursor.get("confirmed", 0)):
            return False
        acked = cursor.get("acked", [])
        if not isinstance(acked, list) or not all(_is_int(a) for a in acked):
            return False
        if not offset_runs.valid(cursor.get("runs", [])):
            return False
    return True


def _valid_held(held: object) -> bool:
    if not isinstance(held, dict):
        return False
    roles = {role.value for role in Role}
    return all(
        isinstance(n, str)
        and n.isdigit()
        and isinstance(doc, dict)
        and doc.get("role") in roles
        and _is_int(doc.get("epoch"))
        and isinstance(doc.get("leader"), str)
        and isinstance(doc.get("replicas"), list)
        and isinstance(doc.get("isr", []), list)
        for n, doc in held.items()
    )


def valid_metadata(value: object) -> bool:
    """Whether ``value`` has the shape :func:`metadata_document` writes."""
    if not isinstance(value, dict) or not isinstance(value.get("topics", []), list):
        return False
    for topic in value.get("topics", []):
        if not isinstance(topic, dict) or not isinstance(topic.get("name"), str):
            return False
        if not _is_int(topic.get("partitions", 1)) or topic.get("partitions", 1) < 1:
            return False
        channels = topic.get("channels", [])
        if not isinstance(channels, list):
            return False
        if not _valid_held(topic.get("held", {})):
            return False
        if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in channels):
            return False
    return True
