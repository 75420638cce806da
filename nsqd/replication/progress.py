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
alone changes nothing there), so its last report is kept and given again, the same object,
for as long as the partition's state is at the same revision (``PartitionState.revision``;
looking at the replicas again cost a node leading 3,333 idle partitions a third of its idle
time), and a topic none of whose partitions' states moved (``Topic.revision``) gives all of its
reports again without a look at any partition: telling whether anything decisive changed
(:class:`Outbox`) then skips them by identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..broker import Broker, Topic, bytes_behind
from ..broker.partition import Partition
from ..core.partition_state import PartitionState

CAUGHT_UP_WINDOW = 1.0  # seconds
#: seconds between reports while a replica that is not caught up has bytes left to copy (the
#: bytes alone change with every batch: reporting each change would post four times a second)
COPY_REPORT_INTERVAL = 1.0

Report = dict[str, object]


@dataclass
class Outbox:
    """Which of a leader's reports one lookupd gets next. lookupd keeps each partition's last
    report (a report speaks for its partition only), so a post carries the reports that
    changed since that lookupd last got them: at once when anything but the bytes behind
    changed, every :data:`COPY_REPORT_INTERVAL` seconds while a replica not caught up has
    bytes left; and all of them every ``repeat`` seconds, and after a post that failed (a
    lookupd that restarted holds none). A node leading thousands of partitions posted them
    all at every change: while topics were created, four times a second, and lookupd spent
    most of its time reading them."""

    repeat: float
    #: (topic, partition) -> the report this lookupd last got
    _sent: dict[tuple[object, object], Report] = field(default_factory=dict)
    _all_at: float = float("-inf")  # when every report last went
    _bytes_at: float = float("-inf")  # when a copy's bytes last went

    def take(self, reports: list[Report], now: float) -> tuple[list[Report], bool]:
        """The reports to post at ``now`` (possibly none), and whether they are all of them."""
        if now - self._all_at >= self.repeat:
            return reports, True
        bytes_due = now - self._bytes_at >= COPY_REPORT_INTERVAL
        sent = self._sent
        out = []
        for report in reports:
            before = sent.get((report["topic"], report["partition"]))
            if before is report:  # a kept report given again (ProgressTracker)
                continue
            decisive = before is None or _decisive(report) != _decisive(before)
            if decisive or (bytes_due and report != before and _copying(report)):
                out.append(report)
        return out, False

    def posted(self, reports: list[Report], every: bool, now: float) -> None:
        """lookupd took ``reports`` (all of this node's when ``every``)."""
        if every:
            self._sent.clear()
            self._all_at = now
        for report in reports:
            self._sent[(report["topic"], report["partition"])] = report
        if any(_copying(report) for report in reports):
            self._bytes_at = now

    def failed(self) -> None:
        """A post failed: the next one carries every report."""
        self._all_at = float("-inf")


def _decisive(report: Report) -> Report:
    return {k: v for k, v in report.items() if k != "behind"}


def _copying(report: Report) -> bool:
    """Whether a replica not caught up has bytes left to copy."""
    behind, caught_up = report.get("behind"), report.get("caught_up")
    if not (isinstance(behind, dict) and isinstance(caught_up, list)):
        return False
    return any(n > 0 and node not in caught_up for node, n in behind.items())


@dataclass
class ProgressTracker:
    """Builds the progress reports of one node (see the module doc)."""

    lag_max: float
    _led_since: dict[tuple[str, int, int], float] = field(default_factory=dict)
    #: (topic, partition, epoch, follower) -> the first report that found it short of the end
    _short_since: dict[tuple[str, int, int, str], float] = field(default_factory=dict)
    #: partition -> the last report of it while its replicas all held the whole log
    #: (:func:`_settled`), the revision of the state it was built from, and its key in
    #: ``_led_since``
    _kept: dict[Partition, _Kept] = field(default_factory=dict)
    #: topic -> its partitions and its revision when each partition it led was settled, and
    #: their reports and keys
    _topics: dict[Topic, _Topic] = field(default_factory=dict)

    def reports(self, broker: Broker, now: float) -> list[Report]:
        """One report per led partition with replicas: topic, partition, epoch, caught_up,
        lagging, confirmed (node ids, sorted) and behind (node id -> bytes). A topic whose
        partitions' states have not changed since its last reports (its ``revision``), all
        settled then, gets them again without a look at any partition."""
        out: list[Report] = []
        led: set[tuple[str, int, int]] = set()
        topics_before, topics = self._topics, {}
        kept = self._kept
        for topic in broker.list_topics():
            if topic.deleted:
                continue
            partitions = topic.partitions
            revision = topic.revision.value
            cached = topics_before.get(topic)
            if cached is not None and cached[1] == revision and cached[0] == partitions:
                topics[topic] = cached
                out += cached[2]
                led.update(cached[3])
                continue
            reports: list[Report] = []
            keys: list[tuple[str, int, int]] = []
            whole = True  # every report of the topic is kept (none holds for a moment only)
            for partition in partitions:
                found = kept.get(partition)
                if found is None or found[0] != partition.state.revision:
                    found = self._report(topic, partition, now)
                    if found is None or found[0] < 0:
                        kept.pop(partition, None)
                    else:
                        kept[partition] = found
                    if found is None:
                        continue  # not led, or no replicas
                    whole = whole and found[0] >= 0
                reports.append(found[1])
                keys.append(found[2])
            out += reports
            led.update(keys)
            if whole:
                topics[topic] = list(partitions), revision, reports, keys
        self._topics = topics
        if len(kept) > len(led):  # partitions no longer led here, or gone
            self._kept = {p: found for p, found in kept.items() if found[2] in led}
        for key in set(self._led_since) - led:
            del self._led_since[key]
        for short in [s for s in self._short_since if s[:3] not in led]:
            del self._short_since[short]
        return out

    def _report(self, topic: Topic, partition: Partition, now: float) -> _Kept | None:
        """The report of ``partition`` if it is led here with replicas (None otherwise), as
        kept: with its state's revision if settled (-1 if not: it holds for this moment)."""
        state = partition.state
        replicas = state.placement.replicas
        if not state.leads or not replicas:
            return None
        key = (topic.name, partition.number, state.epoch)
        since = self._led_since.setdefault(key, now)
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
        return (state.revision if _settled(state, replicas) else -1), report, key


#: a report as kept: the revision of the state it was built from (-1: not to be kept), the
#: report, and its key in ``_led_since``
_Kept = tuple[int, Report, tuple[str, int, int]]
#: a topic's reports as kept: its partitions, the topic's revision (``Topic.revision``), the
#: led ones' reports and their keys
_Topic = tuple[list[Partition], int, list[Report], list[tuple[str, int, int]]]


def _settled(state: PartitionState, replicas: tuple[str, ...]) -> bool:
    """Whether every replica holds the whole log: the partition's report is the same, whatever
    the time, until its state changes (every replica caught up, none short of the end, none
    behind)."""
    end = state.log_end
    if any(node not in replicas for node in state.followers):
        return False  # (not seen) an in-sync follower that is no replica: its acks are its own
    return all(state.has_acked(node) and state.acked(node) >= end for node in replicas)
