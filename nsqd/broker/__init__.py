"""The broker: the composition of ``nsqd.core`` state and ``nsqd.storage`` logs (async)."""

from .broker import Broker as Broker, open_broker as open_broker
from .channel import Channel as Channel, Subscriber as Subscriber
from .config import BrokerConfig as BrokerConfig
from .partition import Partition as Partition
from .topic import Topic as Topic

__all__ = ["Broker", "BrokerConfig", "Channel", "Partition", "Subscriber", "Topic", "open_broker"]
