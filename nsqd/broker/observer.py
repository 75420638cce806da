"""Latency hooks: the broker times each publish (the append to the page cache) and each fsync;
:mod:`nsqd.observe.metrics` plugs Prometheus histograms in. The broker itself knows no metrics
library."""

from __future__ import annotations

from typing import Protocol


class Observer(Protocol):
    """Anything with ``observe(seconds)`` (a ``prometheus_client.Histogram`` has it)."""

    def observe(self, amount: float) -> None: ...


class Discard:
    """The default observer: drops every observation."""

    def observe(self, amount: float) -> None:
        """Ignore ``amount``."""
