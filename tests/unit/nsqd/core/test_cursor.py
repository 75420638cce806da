"""PartitionCursor, the pure channel state, as a Hypothesis state machine against a model
(including its timeouts: one lazily deleted heap entry per delivered batch or TOUCH, and the
flights new records are delivered in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nsqd.core.cursor import PartitionCursor
from nsqd.core.errors import NotInFlightError, NotOwnerError
from nsqd.core.inflight import Flight, Message


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp_ns: int = 0
    internal_id: int = 0
    trace_id: int = 0
    deliver_at_ns: int = 0
    body: bytes = b""


OWNERS = ("a", "b")


class LazyRun(Sequence[Rec]):
    """A framed read's run as the cursor sees it (the storage's ``FrameRun``): a sequence
    whose records are made when asked for; it counts what is asked."""

    def __init__(self, records: list[Rec]) -> None:
        self._records = records
        self.asked = 0

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index):  # type: ignore[no-untyped-def,override]
        self.asked += 1
        return self._records[index]


class CursorMachine(RuleBasedStateMachine):
    """Model: the set of offsets not yet FINed; order of first deliveries in ordered mode."""

    @initialize(
        ordered=st.booleans(), count=st.sampled_from([0, 1, 7, 30, 30, 60]), dpub=st.booleans()
    )
    def setup(self, ordered: bool, count: int, dpub: bool) -> None:
        # with dpub, every fifth record is deferred (DPUB) to a time the machine reaches later
        self.log = [
            Rec(
                i,
                timestamp_ns=10 * i,
                deliver_at_ns=1_000 + 150 * i if dpub and i % 5 == 2 else 0,
                body=bytes(i % 7),
            )
            for i in range(count)
        ]
        self.cursor = PartitionCursor(0, 0)
        self.cursor.ordered = ordered
        self.now = 1_000
        self.unfinished = set(range(count))
        self.held: dict[int, str] = {}  # offset in flight -> its owner
        self.deadlines: dict[int, int] = {}  # of the held offsets
        self.delivered: list[int] = []
        self.attempts: dict[int, int] = {}  # deliveries of each offset

    def fetch(self, offset: int, n: int, _max_bytes: int | None = None) -> list[Rec]:
        return self.log[offset : offset + n]

    def fetch_framed(
        self, offset: int, n: int, max_bytes: int, now_ns: int
    ) -> tuple[LazyRun, int] | None:
        """As the storage's frame reads: from ``offset``, those due, until the bodies reach
        ``max_bytes`` (one at least); None when the first is not due."""
        run: list[Rec] = []
        size = 0
        for record in self.log[offset : offset + n]:
            if record.deliver_at_ns > now_ns:
                break
            run.append(record)
            size += len(record.body)
            if size >= max_bytes:
                break
        return (LazyRun(run), size) if run else None

    @rule(
        n=st.sampled_from([1, 2, 3, 5, 40]),
        owner=st.sampled_from(OWNERS),
        timeout=st.sampled_from([100, 100, 30, 400]),
        how=st.sampled_from(["each", "batch", "flight", "flight", "framed", "framed"]),
        max_bytes=st.sampled_from([None, None, 1, 9, 40]),
    )
    def take(self, n: int, owner: str, timeout: int, how: str, max_bytes: int | None) -> None:
        deadline = self.now + timeout
        if how in ("flight", "framed") and self.cursor.only_new():
            framed = self.fetch_framed if how == "framed" else None
            records = self.cursor.take_flight(
                self.fetch, n, self.now, len(self.log), owner, deadline, max_bytes, framed
            )
            if isinstance(records, LazyRun):
                assert records.asked == 0  # nothing of the run is decoded by the take
            got = [(r.offset, 1) for r in records]
        else:
            messages = self.cursor.take(self.fetch, n, self.now, len(self.log), max_bytes)
            if how == "each":
                for m in messages:
                    self.cursor.start_flight(m, owner, deadline, self.now)
            else:
                self.cursor.start_flights(messages, owner, deadline, self.now)
            got = [(m.offset, m.attempts) for m in messages]
        assert len(got) <= n
        sizes = [len(self.log[offset].body) for offset, _ in got]
        assert self.cursor.taken_bytes == sum(sizes)
        if max_bytes is not None:  # no more once the bodies reach it (one message at least)
            assert sum(sizes[:-1]) < max_bytes
        for offset, attempts in got:
            assert offset in self.unfinished
            assert self.log[offset].deliver_at_ns <= self.now  # a DPUB not before its time
            assert offset not in self.held
            self.attempts[offset] = self.attempts.get(offset, 0) + 1
            assert attempts == self.attempts[offset]
            self.held[offset] = owner
            self.deadlines[offset] = deadline
            self.delivered.append(offset)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), extra=st.sampled_from([0, 10, 100, 500]))
    def touch(self, data: st.DataObject, extra: int) -> None:
        offset = data.draw(st.sampled_from(sorted(self.held)))
        owner = self.held[offset]
        self.cursor.touch(offset, owner, self.now + extra)
        self.deadlines[offset] = self.now + extra

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def fin(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.held)))
        owner = self.held.pop(offset)
        del self.deadlines[offset]
        assert self.cursor.finish(offset, owner) is self.log[offset]
        self.unfinished.discard(offset)

    @rule(data=st.data(), owner=st.sampled_from(OWNERS))
    def fin_run(self, data: st.DataObject, owner: str) -> None:
        """A consumer's run of FINs: held ones (of either owner), repeats, unknown offsets."""
        pool = [*sorted(self.held), 0, 7, 39]
        self._fin_as_modelled(data.draw(st.lists(st.sampled_from(pool), max_size=8)), owner)

    @rule(data=st.data(), owner=st.sampled_from(OWNERS), stamped=st.booleans())
    def fin_range(self, data: st.DataObject, owner: str, stamped: bool) -> None:
        """A run of consecutive offsets (a consumer FINing in delivery order), as the broker
        passes it: a range, finished at once when one flight of the owner holds it all."""
        held = sorted(self.held)
        start = data.draw(st.sampled_from([*held, 0, 3]))
        length = data.draw(st.integers(0, 45))
        self._fin_as_modelled(range(start, start + length), owner, stamped=stamped)

    def _fin_as_modelled(self, offsets: Sequence[int], owner: str, *, stamped: bool = True) -> None:
        held = dict(self.held)
        done: list[int] = []
        refusals: list[tuple[int, type]] = []
        for index, offset in enumerate(offsets):
            if offset not in held:
                refusals.append((index, NotInFlightError))
            elif held[offset] != owner:
                refusals.append((index, NotOwnerError))
            else:
                done.append(offset)
                del held[offset]
        stamps: list[int] | None = [] if stamped else None
        finished, refused = self.cursor.finish_run(offsets, owner, stamps)
        assert finished == len(done)
        if stamps is not None:
            assert stamps == [self.log[offset].timestamp_ns for offset in done]
        assert [(index, type(exc)) for index, exc in refused] == refusals
        self._forget(done)

    @precondition(lambda self: bool(self.held))
    @rule(owner=st.sampled_from(OWNERS), keep=st.integers(0, 3))
    def fin_all_but(self, owner: str, keep: int) -> None:
        """A run of FINs of all but ``keep`` of an owner's messages (flights left with few
        members: they give each a message of their own)."""
        mine = sorted(offset for offset, who in self.held.items() if who == owner)
        done = mine[keep:]
        consecutive = done == list(range(done[0], done[0] + len(done))) if done else False
        run = range(done[0], done[0] + len(done)) if consecutive else done
        finished, refused = self.cursor.finish_run(run, owner)
        assert (finished, refused) == (len(done), [])
        self._forget(done)

    def _forget(self, done: list[int]) -> None:
        for offset in done:
            del self.held[offset]
            del self.deadlines[offset]
            self.unfinished.discard(offset)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), delay=st.sampled_from([0, 0, 50, 500]))
    def req(self, data: st.DataObject, delay: int) -> None:
        offset = data.draw(st.sampled_from(sorted(self.held)))
        owner = self.held.pop(offset)
        del self.deadlines[offset]
        self.cursor.requeue(offset, owner, delay, self.now)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def wrong_owner_is_refused(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.held)))
        owner = self.held[offset]
        other = "b" if owner == "a" else "a"
        try:
            self.cursor.finish(offset, other)
        except NotOwnerError:
            return
        raise AssertionError("another client's FIN was accepted")

    @rule(offset=st.integers(0, 40))
    def fin_unknown_is_refused(self, offset: int) -> None:
        if offset in self.held:
            return
        try:
            self.cursor.finish(offset, "a")
        except NotInFlightError:
            return
        raise AssertionError("FIN of a message not in flight was accepted")

    @rule(step=st.sampled_from([10, 200, 1000]))
    def time_passes(self, step: int) -> None:
        self.now += step
        owners, _released = self.cursor.expire(self.now, len(self.log))
        timed_out = sorted(o for o, d in self.deadlines.items() if d <= self.now)
        assert sorted(owners) == sorted(self.held[o] for o in timed_out)
        assert not set(timed_out) & set(self.cursor.in_flight)
        assert set(self.held) - set(timed_out) == set(self.cursor.in_flight)
        for offset in timed_out:
            del self.held[offset]
            del self.deadlines[offset]

    @invariant()
    def next_deadline_is_the_earliest_one(self) -> None:
        candidates = list(self.deadlines.values())
        if self.cursor.deferred:
            candidates.append(self.cursor.deferred[0].due_ns)
        assert self.cursor.next_deadline() == (min(candidates) if candidates else None)

    @invariant()
    def in_flight_is_what_is_held(self) -> None:
        in_flight = self.cursor.in_flight
        assert set(in_flight) == set(self.held)
        for offset, held in in_flight.items():
            assert held.owner == self.held[offset]
            assert held.deadline_ns == self.deadlines[offset]
            if isinstance(held, Flight):
                assert held.record(offset) is self.log[offset]
        flights = {id(h): h for h in in_flight.values() if isinstance(h, Flight)}
        for flight in flights.values():
            assert flight.live == sum(1 for h in in_flight.values() if h is flight)
            # few members left: each gets a message of its own some FINs later, and the
            # records are let go
            pending = [due for due, f in self.cursor._few if f is flight]
            assert not flight.few or pending

    @invariant()
    def every_offset_read_is_counted_once(self) -> None:
        assert self.cursor.message_count == self.cursor.next_read  # no acked or lost offsets

    @invariant()
    def confirmed_is_below_every_unfinished_offset(self) -> None:
        if self.unfinished:
            assert self.cursor.confirmed <= min(self.unfinished)
        else:
            assert self.cursor.confirmed == len(self.log)

    @invariant()
    def ordered_mode_holds_one_and_delivers_in_order(self) -> None:
        if not self.cursor.ordered:
            return
        assert len(self.cursor.in_flight) <= 1
        # a redelivery repeats the head; a new first delivery is always the next offset
        firsts = list(dict.fromkeys(self.delivered))
        assert firsts == sorted(firsts)
        assert all(a <= b for a, b in zip(self.delivered, self.delivered[1:], strict=False))

    def teardown(self) -> None:
        # drain: everything not FINed comes back, and FINing it all empties the cursor
        for _ in range(10_000):
            self.now += 10_000
            self.cursor.expire(self.now, len(self.log))
            got = self.cursor.take(self.fetch, 10, self.now, len(self.log))
            for m in got:
                self.cursor.start_flight(m, "a", self.now + 100, self.now)
                self.cursor.finish(m.offset, "a")
                self.unfinished.discard(m.offset)
            if not self.unfinished:
                break
        assert not self.unfinished
        assert self.cursor.confirmed == len(self.log)


TestCursor = CursorMachine.TestCase
TestCursor.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_seek_drops_in_flight_and_reports_owners() -> None:
    log = [Rec(i) for i in range(10)]
    cursor = PartitionCursor(0, 0)
    got = cursor.take(lambda o, n, _b: log[o : o + n], 3, 0, 10)
    for m in got:
        cursor.start_flight(m, "a", 100, 0)
    assert cursor.seek(7) == ["a", "a", "a"]
    assert (cursor.confirmed, cursor.next_read, cursor.in_flight) == (7, 7, {})
    assert [m.offset for m in cursor.take(lambda o, n, _b: log[o : o + n], 5, 0, 10)] == [7, 8, 9]


def test_ordered_mode_blocks_behind_a_message_that_is_not_due() -> None:
    log = [Rec(0, deliver_at_ns=500), Rec(1)]
    cursor = PartitionCursor(0, 0)
    cursor.ordered = True
    fetch = lambda o, n, _b: log[o : o + n]  # noqa: E731
    assert cursor.take(fetch, 5, 0, 2) == []
    assert not cursor.has_ready(2)
    cursor.expire(600)
    assert [m.offset for m in cursor.take(fetch, 5, 600, 2)] == [0]


def _fetch(log: list[Rec]):  # type: ignore[no-untyped-def]
    def fetch(offset: int, count: int, max_bytes: int | None) -> list[Rec]:
        return log[offset : offset + count]

    return fetch


def test_a_mirrored_cursor_delivers_what_the_leader_had_not_finished() -> None:
    log = [Rec(i) for i in range(10)]
    leader = PartitionCursor(0, 0)
    taken = leader.take(_fetch(log), 6, 1_000, len(log))
    for message in taken:
        leader.start_flight(message, "a", 10_000, 1_000)
    leader.finish(0, "a")
    leader.finish(1, "a")
    leader.finish(3, "a")  # out of order: 2 is still in flight
    leader.requeue(4, "a", 60_000, 1_000)  # held back until 61_000
    confirmed, marks = leader.replica_state()
    assert confirmed == 2
    assert marks == ((3, 0), (4, 61_000))

    follower = PartitionCursor(0, 0)
    follower.mirror(confirmed, marks)
    got = follower.take(_fetch(log), 20, 2_000, len(log))
    # 2 and 5 were in flight (redelivered: at least once), 3 finished, 4 deferred
    assert [m.offset for m in got] == [2, 5, 6, 7, 8, 9]
    assert [m.offset for m in follower.deferred] == [4]
    assert follower.deferred[0].due_ns == 61_000
    assert follower.replica_state() == (2, ((3, 0), (4, 61_000)))


def test_an_ordered_batch_that_times_out_comes_back_whole_and_in_order() -> None:
    """HTTP consume's leases take a run of an ordered partition (``batch=True``); at its
    timeout the run goes back to the head in offset order."""
    log = [Rec(i) for i in range(6)]
    cursor = PartitionCursor(0, 0)
    cursor.ordered = True
    assert [m.offset for m in cursor.take(_fetch(log), 4, 0, 6)] == [0]  # one, as a SUB
    cursor.seek(0)
    batch = cursor.take(_fetch(log), 4, 0, 6, batch=True)
    assert [m.offset for m in batch] == [0, 1, 2, 3]
    for message in batch:
        cursor.start_flight(message, "lease", 100, 0)
    assert cursor.take(_fetch(log), 4, 0, 6, batch=True) == []  # the run is out
    owners, _ = cursor.expire(100)
    assert owners == ["lease"] * 4
    again = cursor.take(_fetch(log), 6, 100, 6, batch=True)
    assert [m.offset for m in again] == [0, 1, 2, 3, 4, 5]
    assert [m.attempts for m in again[:4]] == [1, 1, 1, 1]  # start_flight counts the next


def test_a_timed_out_message_goes_behind_the_waiting_ones() -> None:
    """nsqd puts a timed-out message at the back of the channel's queue: what was published
    before the timeout is delivered first; a message published after it comes after."""
    log = [Rec(i) for i in range(4)]
    cursor = PartitionCursor(0, 0)
    (first,) = cursor.take(_fetch(log), 1, 0, 3)
    cursor.start_flight(first, "a", 100, 0)
    assert cursor.expire(100, 3) == (["a"], 0)
    assert cursor.depth(3) == 3
    order = [(m.offset, m.attempts) for m in cursor.take(_fetch(log), 1, 100, 4)]
    order += [(m.offset, m.attempts) for m in cursor.take(_fetch(log), 10, 100, 4)]
    assert order == [(1, 0), (2, 0), (0, 1), (3, 0)]


def test_ordered_a_timed_out_message_is_next_again() -> None:
    log = [Rec(i) for i in range(3)]
    cursor = PartitionCursor(0, 0)
    cursor.ordered = True
    (first,) = cursor.take(_fetch(log), 1, 0, 3)
    cursor.start_flight(first, "a", 100, 0)
    cursor.expire(100, 3)
    assert [m.offset for m in cursor.take(_fetch(log), 5, 100, 3)] == [0]


def test_new_records_go_out_as_one_flight_and_few_left_get_messages_of_their_own() -> None:
    log = [Rec(i, timestamp_ns=10 * i) for i in range(80)]
    fetch = _fetch(log)

    cursor = PartitionCursor(3, 0)
    records = cursor.take_flight(fetch, 32, 1_000, 40, "a", 5_000)
    assert records == log[:32]
    flights = {id(held) for held in cursor.in_flight.values()}
    assert len(flights) == 1
    assert isinstance(cursor.in_flight[0], Flight)
    # FINs of all but two: once the cursor has finished as many messages again as the flight
    # had, the two left become messages (attempts 1, the flight's deadline)
    assert cursor.finish_run([o for o in range(32) if o not in (5, 20)], "a") == (30, [])
    cursor.take_flight(fetch, 32, 1_000, 80, "a", 6_000)
    assert cursor.finish_run(range(32, 63), "a") == (31, [])
    assert cursor.finish_run([], "a") == (0, [])
    assert isinstance(cursor.in_flight[5], Flight)  # 61 finished: one short
    assert cursor.finish_run(range(63, 64), "a") == (1, [])
    assert isinstance(cursor.in_flight[5], Flight)  # compacted at the next run's start
    assert cursor.finish_run([], "a") == (0, [])
    left = cursor.in_flight
    assert sorted(left) == [5, 20]
    for message in left.values():
        assert isinstance(message, Message)
        assert (message.attempts, message.deadline_ns, message.partition) == (1, 5_000, 3)
    # the timeout gives both back (next, with no log end given): delivered again as attempt 2
    owners, _ = cursor.expire(5_000)
    assert owners == ["a", "a"]
    assert not cursor.only_new()
    again = cursor.take(fetch, 2, 5_000, 40)
    assert [(m.offset, m.attempts) for m in again] == [(5, 1), (20, 1)]
    cursor.start_flights(again, "b", 9_000, 5_000)
    assert [m.attempts for m in again] == [2, 2]


def test_a_flight_member_touched_or_requeued_leaves_the_flight() -> None:
    log = [Rec(i) for i in range(4)]
    cursor = PartitionCursor(0, 0)
    cursor.take_flight(_fetch(log), 4, 0, 4, "a", 100)
    flight = cursor.in_flight[0]
    assert isinstance(flight, Flight)
    assert flight.live == 4
    cursor.touch(1, "a", 500)
    cursor.requeue(2, "a", 0, 0)
    assert flight.live == 2
    assert isinstance(cursor.in_flight[1], Message)
    assert cursor.in_flight[1].deadline_ns == 500
    assert 2 not in cursor.in_flight
    owners, _ = cursor.expire(100, 4)  # 0 and 3 time out, 1 was touched past it
    assert owners == ["a", "a"]
    assert sorted(cursor.in_flight) == [1]
    assert [m.offset for m in cursor.take(_fetch(log), 9, 100, 4)] == [2, 0, 3]


def test_a_range_of_fins_is_finished_at_once_only_when_one_flight_of_the_owner_holds_it() -> None:
    log = [Rec(i) for i in range(20)]
    fetch = _fetch(log)

    cursor = PartitionCursor(0, 0)
    cursor.take_flight(fetch, 10, 0, 20, "a", 100)
    cursor.take_flight(fetch, 10, 0, 20, "b", 100)
    # another owner's range: each refused, nothing finished
    done, refused = cursor.finish_run(range(4), "b")
    assert done == 0
    assert [(i, type(e)) for i, e in refused] == [(i, NotOwnerError) for i in range(4)]
    # a range over two flights (a's end, b's start): a's finished, b's refused for a
    done, refused = cursor.finish_run(range(8, 12), "a")
    assert done == 2
    assert [(i, type(e)) for i, e in refused] == [(2, NotOwnerError), (3, NotOwnerError)]
    assert cursor.acked == {8, 9}
    # a range with a member requeued meanwhile, and one past the log: those two refused
    cursor.requeue(14, "b", 0, 0)
    done, refused = cursor.finish_run(range(12, 21), "b")
    assert done == 7
    assert [(i, type(e)) for i, e in refused] == [(2, NotInFlightError), (8, NotInFlightError)]
    # the owner's whole flight in order: confirmed moves past it
    assert cursor.finish_run(range(8), "a") == (8, [])
    assert cursor.confirmed == 10
    assert sorted(cursor.in_flight) == [10, 11]


def test_a_range_over_flights_of_one_owner_is_finished_flight_by_flight() -> None:
    log = [Rec(i, timestamp_ns=7 * i) for i in range(30)]
    fetch = _fetch(log)

    cursor = PartitionCursor(0, 0)
    first = cursor.take_flight(fetch, 10, 0, 30, "a", 100)
    second = cursor.take_flight(fetch, 10, 0, 30, "a", 100)
    cursor.take_flight(fetch, 10, 0, 30, "b", 100)
    stamps: list[int] = []
    done, refused = cursor.finish_run(range(3, 25), "a", stamps)
    assert done == 17  # 3..19: the rest of the first flight, all of the second
    assert [(i, type(e)) for i, e in refused] == [(i, NotOwnerError) for i in range(17, 22)]
    done, refused = cursor.finish_run(range(3), "a", stamps)
    assert (done, refused) == (3, [])
    assert stamps == [7 * i for i in range(3, 20)] + [0, 7, 14]
    assert cursor.confirmed == 20
    assert sorted(cursor.in_flight) == list(range(20, 30))
    assert (first[0].offset, second[-1].offset) == (0, 19)


def test_a_fin_that_compacts_its_own_flight_first_returns_its_record() -> None:
    """finish() of a member whose flight the FIN's run gives messages of their own first."""
    log = [Rec(i, body=b"m%03d" % i) for i in range(128)]
    fetch = _fetch(log)
    cursor = PartitionCursor(1, 0)
    cursor.take_flight(fetch, 64, 10, 128, "a", 500)
    cursor.finish_run([i for i in range(64) if i not in (1, 2, 3, 4)], "a")  # 4 of 64 left
    cursor.take_flight(fetch, 64, 10, 128, "a", 500)
    cursor.finish_run(range(64, 128), "a")  # a flight's worth later: compaction is due
    assert cursor.finish(1, "a") is log[1]
    assert isinstance(cursor.in_flight[2], Message)
