"""Opening partition logs: a topic's partitions as placed on this node, each log sharing the
broker's read-cache budget and segment-descriptor bound."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from protocol.names import is_ephemeral

from ..core.ownership import STANDALONE, Placement
from ..core.producers import Producers
from ..storage.cache import CacheBudget
from ..storage.checkpoint import create_directories, write_checkpoint
from ..storage.handles import HandleCache
from ..storage.log import PartitionLog
from ..storage.memory import MemoryLog
from . import idempotence
from .config import BrokerConfig
from .journaling import last_generation
from .partition import Partition
from .persistence import STATE_FILE, file_stamp, load_state, topic_directory
from .topic import Topic

#: partition logs opened ahead of joining the topic table, by (topic, partition number)
Opened: TypeAlias = dict[tuple[str, int], Partition]


class LogOpener:
    """Builds topics and partitions with their logs opened."""

    def __init__(
        self,
        config: BrokerConfig,
        cache: CacheBudget,
        handles: HandleCache,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.now = now  # wall time (s): the producer state read back expires by it
        self.read_cache = cache
        self.handles = handles

    def build_topic(
        self,
        name: str,
        count: int,
        states: dict[int, dict[str, object]],
        held: Mapping[int, Placement] | None = None,
        opened: Opened | None = None,
        **flags: bool,
    ) -> Topic:
        """A topic of ``count`` partitions (``flags``: ordered, ext) with the logs of the ones
        ``held`` here opened (all of them, led, when ``held`` is None: standalone); those in
        ``opened`` (:meth:`open_all`, as placed) are taken from it."""
        numbers = range(count) if held is None else sorted(held)
        parts = [
            self.take_or_open(opened, name, n, STANDALONE if held is None else held[n], states)
            for n in numbers
        ]
        return Topic(name, parts, ephemeral=is_ephemeral(name), partition_num=count, **flags)

    def open_all(self, wanted: Sequence[tuple[str, int, Placement]]) -> Opened:
        """:meth:`open_partition` of each ``(topic, number, placement)``: blocking file I/O,
        for a worker thread (nothing here touches the topic table). The new partitions'
        directories are made first, their topic's directory fsynced once for all of them.
        On an error the ones opened are closed again and the error propagates."""
        directories = {
            (name, number): topic_directory(self.config.data_path, name) / str(number)
            for name, number, _ in wanted
            if not is_ephemeral(name)
        }
        made = create_directories(directories.values())
        new = {key for key, directory in directories.items() if directory in made}
        opened: Opened = {}
        try:
            for name, number, placement in wanted:
                created = (name, number) in new
                opened[name, number] = self.open_partition(name, number, {}, placement, created)
        except BaseException:
            for partition in opened.values():
                partition.log.close()
            raise
        return opened

    def take_or_open(
        self,
        opened: Opened | None,
        topic: str,
        number: int,
        placement: Placement,
        states: Mapping[int, dict[str, object]] | None = None,
    ) -> Partition:
        """Partition ``number`` of ``topic`` as ``placement`` has it: from ``opened`` when it
        was opened so (taken out of it), else opened now."""
        partition = None if opened is None else opened.pop((topic, number), None)
        if partition is not None:
            if partition.state.placement == placement:
                return partition
            partition.log.close()  # (not seen) opened for another placement
        return self.open_partition(topic, number, states or {}, placement)

    def open_partition(
        self,
        topic: str,
        number: int,
        states: Mapping[int, dict[str, object]],
        placement: Placement = STANDALONE,
        created: bool | None = None,
    ) -> Partition:
        """Partition ``number`` of ``topic`` with its log opened (created if new; ``created``
        says whether it is when its directory was made already, :meth:`open_all`)."""
        config = self.config
        producers = Producers(config.producer_state_ttl, config.max_producers)
        if is_ephemeral(topic):
            memory = MemoryLog(number, self.config.mem_queue_size)
            return Partition(number, memory, None, 0, placement, producers)
        directory = topic_directory(self.config.data_path, topic) / str(number)
        if created is None:
            created = not directory.exists()
        plog = PartitionLog.open(
            directory,
            partition=number,
            max_bytes_per_file=self.config.max_bytes_per_file,
            cache=self.read_cache,
            handles=self.handles,
        )
        state = states[number] if number in states else load_state(directory, file_stamp())
        start = state.get("topic_start", plog.start_offset)
        assert isinstance(start, int)
        partition = Partition(number, plog, directory, start, placement, producers)
        partition.created = created
        partition.journal_generation = last_generation(directory, state)
        idempotence.restore(partition, state, self.now())
        first = idempotence.saved_state(state, partition)
        if first is not None:  # before any write: a later start reads stamps from here on
            write_checkpoint(directory / STATE_FILE, first)
        return partition
