"""What a leader tells lookupd about its followers: which are caught up, which lag.

lookupd owns the in-sync set (DESIGN.md §5); the leader only reports. For every partition this
node leads that has replicas, a follower is *caught up* when it holds the whole log now, or did
within :data:`CAUGHT_UP_WINDOW` (a busy log rarely stands still at the moment of a report); it
*lags* when it has not held the whole log for ``lag_max`` seconds (counted from when this node
took the lead under this epoch, so a new leader gives its followers time to connect).
A follower is *confirmed* when it is in the in-sync set this leader applies and holds the
whole log up to the high-watermark: every acknowledged message is on it, and every later
acknowledgement waits for it (lookupd hands leadership over only to such a follower).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..broker import Broker

CAUGHT_UP_WINDOW = 1.0  # seconds

Report = dict[str, object]


@dataclass
class ProgressTracker:
    """Builds the progress reports of one node (see the module doc)."""

    lag_max: float
    _led_since: dict[tuple[str, int, int], float] = field(default_factory=dict)

    def reports(self, broker: Broker, now: float) -> list[Report]:
        """One report per led partition with replicas: topic, partition, epoch, caught_up,
        lagging (node ids, sorted)."""
        out: list[Report] = []
        led: set[tuple[str, int, int]] = set()
        for topic in broker.list_topics():
            if topic.deleted:
                continue
            for partition in topic.led:
                state = partition.state
                replicas = state.placement.replicas
                if not replicas:
                    continue
                key = (topic.name, partition.number, state.epoch)
                led.add(key)
                since = self._led_since.setdefault(key, now)
                caught_up, lagging = [], []
                for node in replicas:
                    at = state.caught_up_at(node)
                    whole = state.has_acked(node) and state.acked(node) >= state.log_end
                    if whole or (at is not None and now - at <= CAUGHT_UP_WINDOW):
                        caught_up.append(node)
                    elif now - max(at or since, since) > self.lag_max:
                        lagging.append(node)
                confirmed = [
                    node
                    for node in state.followers
                    if state.has_acked(node) and state.acked(node) >= state.high_watermark
                ]
                out.append(
                    {
                        "topic": topic.name,
                        "partition": partition.number,
                        "epoch": state.epoch,
                        "caught_up": sorted(caught_up),
                        "lagging": sorted(lagging),
                        "confirmed": sorted(confirmed),
                    }
                )
        for key in set(self._led_since) - led:
            del self._led_since[key]
        return out
