"""Opening partition logs: a topic's partitions as placed on this node, each log sharing the
broker's read-cache budget and segment-descriptor bound."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from protocol.names import is_ephemeral

from ..core.ownership import STANDALONE, Placement
from ..core.producers import Producers
from ..storage.cache import CacheBudget
from ..storage.checkpoint import write_checkpoint
from ..storage.handles import HandleCache
from ..storage.log import PartitionLog
from ..storage.memory import MemoryLog
from . import idempotence
from .config import BrokerConfig
from .journaling import last_generation
from .partition import Partition
from .persistence import STATE_FILE, file_stamp, load_state, topic_directory
from .topic import Topic


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
        **flags: bool,
    ) -> Topic:
        """A topic of ``count`` partitions (``flags``: ordered, ext) with the logs of the ones
        ``held`` here opened (all of them, led, when ``held`` is None: standalone)."""
        numbers = range(count) if held is None else sorted(held)
        parts = [
            self.open_partition(name, n, states, STANDALONE if held is None else held[n])
            for n in numbers
        ]
        return Topic(name, parts, ephemeral=is_ephemeral(name), partition_num=count, **flags)

    def open_partition(
        self,
        topic: str,
        number: int,
        states: Mapping[int, dict[str, object]],
        placement: Placement = STANDALONE,
    ) -> Partition:
        """Partition ``number`` of ``topic`` with its log opened (created if new)."""
        config = self.config
        producers = Producers(config.producer_state_ttl, config.max_producers)
        if is_ephemeral(topic):
            memory = MemoryLog(number, self.config.mem_queue_size)
            return Partition(number, memory, None, 0, placement, producers)
        directory = topic_directory(self.config.data_path, topic) / str(number)
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
        partition.journal_generation = last_generation(directory, state)
        idempotence.restore(partition, state, self.now())
        first = idempotence.saved_state(state, partition)
        if first is not None:  # before any write: a later start reads stamps from here on
            write_checkpoint(directory / STATE_FILE, first)
        return partition
