"""Startup: topics and channels back from ``pnsq.dat`` and the partition directories.

A topic keeps its partition count and youzan flags (``ordered``, ``ext``); a channel its paused,
ordered and youzan skip flags, and in each partition the cursor checkpointed in ``state.json``:
consumption resumes at ``confirmed`` (FINed out of order above it are skipped), so an ordered
channel goes on in order after ``kill -9``, redelivering at most what was FINed since the last
checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..core import offset_runs
from .channel import Channel
from .logs import LogOpener
from .persistence import (
    file_stamp,
    held_placements,
    load_state,
    load_topic_entries,
    restore_channel_flags,
    topic_directory,
)
from .topic import Topic

log = logging.getLogger("nsqd.broker")


def restore_topics(data_path: Path, logs: LogOpener) -> list[Topic]:
    """The topics saved under ``data_path``, with their channels and partition logs opened
    by ``logs`` (the caller lists them and starts the channels' timers)."""
    stamp = file_stamp()
    restored: list[Topic] = []
    entries = load_topic_entries(data_path, stamp)
    for name, entry in entries.items():
        count = entry.get("partitions", 1)
        assert isinstance(count, int)
        directory = topic_directory(data_path, name)
        held = held_placements(entry)
        numbers = range(count) if held is None else sorted(held)
        states = {n: load_state(directory / str(n), stamp) for n in numbers}
        topic = logs.build_topic(
            name,
            count,
            states,
            held,
            ordered=bool(entry.get("ordered", False)),
            ext=bool(entry.get("ext", False)),
        )
        topic.paused = bool(entry.get("paused", False))
        topic.managed = held is not None
        meta = entry.get("meta")
        if isinstance(meta, dict):
            topic.channel_auto_create = bool(meta.get("channel_auto_create", True))
            retention, sync_every = meta.get("retention"), meta.get("sync_every")
            topic.retention = float(retention) if isinstance(retention, int | float) else None
            topic.sync_every = sync_every if isinstance(sync_every, int) else None
            min_isr = meta.get("min_isr", 1)
            topic.min_isr = min_isr if isinstance(min_isr, int) and min_isr > 0 else 1
            topic_id = meta.get("topic_id", "")
            topic.topic_id = topic_id if isinstance(topic_id, str) else ""
        restored.append(topic)
        channel_entries = entry.get("channels", [])
        assert isinstance(channel_entries, list)
        flags: dict[str, dict[str, object]] = {str(c["name"]): c for c in channel_entries}
        for state in states.values():
            cursors = state.get("channels", {})
            assert isinstance(cursors, dict)
            for channel_name in cursors:
                flags.setdefault(str(channel_name), {})
        for channel_name, flag_entry in flags.items():
            channel = Channel(topic, channel_name, ephemeral=False)
            restore_channel_flags(channel, flag_entry)
            for partition in topic.partitions:
                saved = states.get(partition.number, {}).get("channels", {})
                assert isinstance(saved, dict)
                cursor = saved.get(channel_name, {})
                confirmed = int(cursor.get("confirmed", partition.topic_start))
                end = partition.log.end_offset  # a checkpoint past a truncated tail: the tail
                start = min(max(confirmed, partition.log.start_offset), end)
                finished = offset_runs.expand(cursor.get("acked", []), cursor.get("runs", []))
                acked = [a for a in finished if start <= a < end]
                channel.add_partition(partition, start, acked, end)
            topic.channels[channel_name] = channel
        log.info("TOPIC(%s): restored, %d channel(s)", name, len(topic.channels))
    return restored
