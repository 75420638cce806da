"""The broker: the composition of ``nsqd.core`` state and ``nsqd.storage`` logs (async), and the
one gate to them: the shells (TCP, HTTP, metrics, the lookupd client) import what they need of
storage's types and errors from here, never from ``nsqd.storage``."""

from ..storage.batch import (
    BodyBatch as BodyBatch,
    join as join_batches,
    new_records as new_records,
)
from ..storage.errors import StorageError as StorageError
from ..storage.frame_runs import FrameLayout as FrameLayout
from ..storage.handles import HandleCache as HandleCache
from ..storage.record import NewRecord as NewRecord, Record as Record
from ..storage.stamp import header_of as ext_header
from .broker import Broker as Broker, open_broker as open_broker
from .channel import Channel as Channel
from .config import BrokerConfig as BrokerConfig
from .partition import Partition as Partition
from .reading import offset_at as offset_at, read_records as read_records
from .statistics import (
    ChannelPartitionStatistics as ChannelPartitionStatistics,
    ChannelStatistics as ChannelStatistics,
    ReplicationStatistics as ReplicationStatistics,
    TopicPartitionStatistics as TopicPartitionStatistics,
    TopicStatistics as TopicStatistics,
    bytes_behind as bytes_behind,
    youzan_style as youzan_style,
)
from .topic import Topic as Topic
from .views import Subscriber as Subscriber, TopicView as TopicView

__all__ = [
    "BodyBatch",
    "Broker",
    "BrokerConfig",
    "Channel",
    "ChannelPartitionStatistics",
    "ChannelStatistics",
    "FrameLayout",
    "HandleCache",
    "NewRecord",
    "Partition",
    "Record",
    "ReplicationStatistics",
    "StorageError",
    "Subscriber",
    "Topic",
    "TopicPartitionStatistics",
    "TopicStatistics",
    "TopicView",
    "bytes_behind",
    "ext_header",
    "join_batches",
    "new_records",
    "offset_at",
    "open_broker",
    "read_records",
    "youzan_style",
]
