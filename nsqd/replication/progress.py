"""What a leader tells lookupd about its followers: which are caught up, which lag.

lookupd owns the in-sync set (DESIGN.md §5); the leader only reports. For every partition this
node leads that has replicas, a follower is *caught up* when it holds the whole log now, or did
within :data:`CAUGHT_UP_WINDOW` (a busy log rarely stands still at the moment of a report); it
*lags* when it has not held the whole log for ``lag_max`` seconds: counted from the first
report that found it short of the log's end (a follower of an idle log acknowledges nothing
for as long as the log stands still, and is not late the moment a publish arrives), and at
the earliest from when this node took the lead under this epoch (so a new leader gives its
followers time to connect).
A follower is *confirmed* when it is in the in-sync set this leader applies and holds the
whole log up to the high-watermark: every acknowledged message is on it, and every later
acknowledgement waits for it (lookupd hands leadership over only to such a follower).

Each report also says how many bytes of the log each replica still lacks (``behind``: node ->
bytes, :func:`~nsqd.broker.bytes_behind`; a replica that has not acknowledged anything under
this epoch is left out): what lookupd shows as a move's ``bytes_left``. A lookupd that does
not know the key ignores it.

Reports are built four times a second, for every led partition: a node leading a thousand
partitions spent a sixth of its idle time on them. A partition whose replicas all hold the
whole log reads the same until its log, high-watermark, in-sync set or replicas change (time
alone changes nothing there), so its last report is kept and given again, the same object:
telling whether anything decisive changed (:func:`due`) then skips it by identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..broker import Broker, bytes_behind
from ..core.partition_state import PartitionState

CAUGHT_UP_WINDOW = 1.0  # seconds
#: seconds between reports while a replica that is not caught up has bytes left to copy (the
#: bytes alone change with every batch: reporting each change would post four times a second)
COPY_REPORT_INTERVAL = 1.0

Report = dict[str, object]


def due(reports: list[Report], last: list[Report] | None, since_sent: float, repeat: float) -> bool:
    """Whether ``reports`` should go to lookupd now, ``since_sent`` seconds after ``last`` went:
    when anything but the bytes behind changed, every ``repeat`` seconds, and every
    :data:`COPY_REPORT_INTERVAL` seconds while a replica not caught up has bytes left."""
    if last is None or since_sent >= repeat or _decisive_change(reports, last):
        return True
    return since_sent >= COPY_REPORT_INTERVAL and reports != last and _copying(reports)


def _decisive_change(reports: list[Report], last: list[Report]) -> bool:
    """Whether anything but the bytes behind differs (a report kept and given again is the
    same object: skipped without a look)."""
    if len(reports) != len(last):
        return True
    return any(
        now is not then and _decisive(now) != _decisive(then)
        for now, then in zip(reports, last, strict=True)
    )


def _decisive(report: Report) -> Report:
    return {k: v for k, v in report.items() if k != "behind"}


def _copying(reports: list[Report]) -> bool:
    for report in reports:
        behind, caught_up = report.get("behind"), report.get("caught_up")
        if not (isinstance(behind, dict) and isinstance(caught_up, list)):
            continue
        if any(n > 0 and node not in caught_up for node, n in behind.items()):
            return True
    return False


@dataclass
class ProgressTracker:
    """Builds the progress reports of one node (see the module doc)."""

    lag_max: float
    _led_since: dict[tuple[str, int, int], float] = field(default_factory=dict)
    #: (topic, partition, epoch, follower) -> the first report that found it short of the end
    _short_since: dict[tuple[str, int, int, str], float] = field(default_factory=dict)
    #: (topic, partition, epoch) -> the last report of a partition whose replicas all held the
    #: whole log, and what it was built from (:meth:`_settled`)
    _kept: dict[tuple[str, int, int], tuple[tuple[object, ...], Report]] = field(
        default_factory=dict
    )

    def reports(self, broker: Broker, now: float) -> list[Report]:
        """One report per led partition with replicas: topic, partition, epoch, caught_up,
        lagging, confirmed (node ids, sorted) and behind (node id -> bytes)."""
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
                settled = _settled(state, replicas)
                kept = self._kept.get(key)
                if settled is not None and kept is not None and kept[0] == settled:
                    out.append(kept[1])
                    continue
                caught_up, lagging = [], []
                for node in replicas:
                    at = state.caught_up_at(node)
                    whole = state.has_acked(node) and state.acked(node) >= state.log_end
                    short = (*key, node)
                    short_since = now
                    if whole:
                        self._short_since.pop(short, None)
                    else:
                        short_since = self._short_since.setdefault(short, now)
                    if whole or (at is not None and now - at <= CAUGHT_UP_WINDOW):
                        caught_up.append(node)
                    elif now - max(at or since, since, short_since) > self.lag_max:
                        lagging.append(node)
                confirmed = [
                    node
                    for node in state.followers
                    if state.has_acked(node) and state.acked(node) >= state.high_watermark
                ]
                report: Report = {
                    "topic": topic.name,
                    "partition": partition.number,
                    "epoch": state.epoch,
                    "caught_up": sorted(caught_up),
                    "lagging": sorted(lagging),
                    "confirmed": sorted(confirmed),
                    "behind": dict(sorted(bytes_behind(partition).items())),
                }
                out.append(report)
                if settled is not None:
                    self._kept[key] = settled, report
                else:
                    self._kept.pop(key, None)
        for key in set(self._led_since) - led:
            del self._led_since[key]
            self._kept.pop(key, None)
        for short in [s for s in self._short_since if s[:3] not in led]:
            del self._short_since[short]
        return out


def _settled(state: PartitionState, replicas: tuple[str, ...]) -> tuple[object, ...] | None:
    """What a report of a partition whose replicas all hold the whole log is built from (its
    log end, high-watermark, in-sync set and replicas: every replica is caught up, none short
    of the end, none behind, whatever the time); None while any replica lacks part of it."""
    end = state.log_end
    if any(node not in replicas for node in state.followers):
        return None  # (not seen) an in-sync follower that is no replica: its acks are its own
    for node in replicas:
        if not state.has_acked(node) or state.acked(node) < end:
            return None
    return end, state.high_watermark, state.followers, replicas
