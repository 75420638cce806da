"""The publish reactor: connections that send single PUBs (or MPUBs) are served from one task.

A client that waits for each PUB's reply costs the task-per-connection loop three steps of
its task per message (woken to read, woken with the append's records, woken after the send)
and the group commit's task a share of a fourth: the scheduler's work, not the publish's, was
most of a synchronous PUB (docs/benchmarks.md). Here, a connection whose commands so far were
PUBs parks its command loop and hands its socket to the reactor; one task waits for any of
those sockets, and for each turn in which some are readable it reads every one, parses its
PUBs, appends each (topic, partition)'s PUBs of all of them with one ``Broker.publish``,
queues their OKs and writes each reply straight to its socket. A producer's numbered PUBs
(idempotent publishing) join that append when their numbers come next
(``Broker.publish_runs``); a retry, a gap or a refusal is its own task's to judge. MPUBs are
served the same way (an OK each, for all its messages; their messages stay together, in the
append they join; a numbered one is a run of its own), so a producer that waits for each
MPUB's reply, such as NSQ's bench_writer, costs no task wake-up per batch either. The parked
command loops do not run at all while their clients only publish.

PUBs to a partition with in-sync followers are appended the same way, and their OKs held until
the partition's high-watermark passes them: the reactor asks the broker to call it then
(:meth:`~nsqd.broker.publish_acks.PublishAcks.when_replicated`), and the call, made by the
task that took the follower's acknowledgement, queues and sends the OKs of every publisher of
that append, or hands each its own copy of the error (leadership moved). Meanwhile those
publishers' sockets are not read (a publisher's replies stay in command order: one that sends
more meanwhile is left out of the poll until its OKs went); a synchronous publisher has
nothing to send until its OK anyway. One acknowledgement releases all the publishers of an
append, numbered or not, with no task woken per publisher.

A turn's publishes to one target are appended in parts of at least :data:`APPEND_PART`
messages, each publisher's whole and in the order read: the single PUBs of many synchronous
publishers still share one append, while the MPUBs (or pipelined runs) of several publishers
go in appends of their own. With a follower in sync each part is pushed to it as soon as it is
appended, so the follower checks and writes one part while the leader encodes the next, and
the first part's publishers get their OKs (and send again) sooner; joined, the follower waited
for the whole turn (measured in docs/benchmarks.md, twelfth pass).

Anything else goes back to the connection's own task, which then does exactly what it does
without the reactor: a command other than PUB (the reactor stops at it, the task handles the
PUBs before it, then the command), a bad command, the peer's EOF, a socket error, PUBs that must
wait for an fsync or a forward to another node (:meth:`Publisher.appends_here`), and an append
that failed (its error, for each publisher that shared it). Replies stay in command order, and a
PUB is acknowledged only once appended (and held by the in-sync followers), as on the task path;
a publisher handed back while its OKs wait (the reactor stopping) has its own task wait for them
first. A connection whose PUBs to a topic held here had to wait (for an fsync) is not parked
again: its own task serves it from then on.

A consumer whose message pump sits idle when a turn's appends give its channel new messages
(:meth:`PublishReactor.deliver_first`) is served from the same turn, before the OKs go out:
its next delivery is written to its socket at once instead of waiting for its pump's task to
be scheduled behind the replies (at 10 k PUBs a second, p99 1.0-1.3 → 0.75-1.1 ms:
docs/benchmarks.md). The pump is woken only when that delivery leaves something for it.

The busy poll: after a turn that came within ``busy_poll`` of the one before it, the reactor
does not go to sleep at once but keeps yielding to Trio, which polls every socket without
blocking meanwhile, for up to ``busy_poll`` (``--busy-poll``, 200 µs): a thread that sleeps
between messages arriving every 100 µs pays, on each, the wake-up of an idle CPU and a cold
run of the whole publish→deliver path (docs/benchmarks.md). Each round of polling first gives
the CPU to any other thread waiting for it (``sched_yield``): on a 2-core machine the clients'
threads wait for the core the poll holds. Turns further apart than ``busy_poll`` (a slower
stream) never start it, so a trickle costs no polling.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Sequence

import outcome
import trio
from trio.lowlevel import Abort, RaiseCancelT, Task

from ..broker import Broker, Record, join_batches
from ..broker.committing import own_copy
from .reactor_contract import Client, Consumer, Read, Taken

MAX_EVENTS = 1024  # ready sockets taken per turn (the rest come with the next poll)
DEFAULT_BUSY_POLL = 200e-6  # seconds: --busy-poll's default (see the module)
APPEND_PART = 64  # messages an append of a turn's publishes to one target holds at least


#: a client's part of one append: its descriptor, the client, what it took
_Share = tuple[int, Client, Taken]

#: a client whose OKs wait for the followers: the client, the append's records, its
#: publishes among them
_Held = tuple[Client, Sequence[Record], Taken]


class PublishReactor:
    """Serves parked publishers from :meth:`run`; until that runs (and after it stopped),
    connections are served by their own tasks."""

    def __init__(
        self,
        broker: Broker,
        busy_poll: float = DEFAULT_BUSY_POLL,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``busy_poll``: seconds to go on polling after a turn that came this soon after the
        one before it (0: never); ``now``: the clock that bounds it (real time: a virtual
        clock does not move while the reactor polls)."""
        self._broker = broker
        self._busy_poll = busy_poll
        self._now = now
        self._epoll = select.epoll()
        self._parked: dict[int, tuple[Client, Task]] = {}  # by descriptor
        #: parked clients whose OKs wait for the followers (by descriptor): not read meanwhile
        self._held: dict[int, _Held] = {}
        #: held ones that became readable meanwhile (a pipelining client, the peer gone): not
        #: polled until released (a synchronous publisher sends nothing before its OK: no
        #: epoll change per held publish)
        self._muted: set[int] = set()
        self.running = False
        self.turns = 0  # turns that appended, their appends, the publishes (PUB or MPUB
        self.appends = 0  # commands) those acknowledged, and the connections handed back to
        # their tasks (tests read these)
        self.publishes = 0
        self.handovers = 0
        self.deliveries = 0  # deliveries made in a turn for idle consumers (tests read it)
        self.sleeps = 0  # waits for a socket to be readable (not polling: tests read it)
        self.holds = 0  # appends whose OKs waited for the followers (tests read it)
        #: the turn's appends are running: a consumer woken now may deliver from this turn
        self.appending = False
        self._woken: list[Consumer] = []

    async def run(self) -> None:
        """Serve until cancelled; then every parked connection goes back to its own task."""
        self.running = True
        epoll = self._epoll
        polling_until = 0.0  # keep polling until then (the busy poll), else wait to be woken
        last_turn = -1.0  # when the last turn ended
        try:
            while True:
                events = epoll.poll(0, MAX_EVENTS)
                if events:
                    # a poll as long as the wait before this turn would have caught it
                    polled = self._now() - last_turn <= self._busy_poll
                    self._serve(events)
                    last_turn = self._now()
                    if polled:
                        polling_until = last_turn + self._busy_poll
                    await trio.lowlevel.checkpoint()  # the tasks the turn woke run first
                elif self._now() < polling_until:
                    # the CPU first to any other thread that waits for it (the clients on a
                    # small machine), then Trio polls every socket without blocking
                    os.sched_yield()
                    await trio.lowlevel.checkpoint()
                else:
                    self.sleeps += 1
                    await trio.lowlevel.wait_readable(epoll.fileno())
        finally:
            self.running = False
            for fd in list(self._parked):
                self._hand_over(fd)
            epoll.close()

    async def park(self, client: Client) -> None:
        """Serve ``client``'s PUBs until its own task must go on (:class:`Read`)."""
        fd = client.fileno()
        self._epoll.register(fd, select.EPOLLIN)  # level-triggered: no re-arming per read
        self._parked[fd] = (client, trio.lowlevel.current_task())

        def abort(_: RaiseCancelT) -> Abort:
            self._forget(fd)
            return Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _forget(self, fd: int) -> _Held | None:
        """Stop serving ``fd``; what it held, if anything."""
        del self._parked[fd]
        if fd in self._muted:
            self._muted.discard(fd)
        else:
            self._epoll.unregister(fd)
        return self._held.pop(fd, None)

    def _hand_over(self, fd: int) -> None:
        self.handovers += 1
        client, task = self._parked[fd]
        held = self._forget(fd)
        if held is not None:
            client.reactor_unreplicated(held[1], held[2])
        trio.lowlevel.reschedule(task, outcome.Value(None))

    def deliver_first(self, consumer: Consumer) -> None:
        """While :attr:`appending`: ``consumer``'s idle pump was woken by this turn's appends;
        its delivery is made before the turn's replies are sent."""
        self._woken.append(consumer)

    def _serve(self, events: list[tuple[int, int]]) -> None:
        """Read every ready client, then each target's appends (:func:`parts`), then
        deliveries for the idle consumers those appends woke, then the replies."""
        # per (topic, partition): every client's PUBs, in the order read
        targets: dict[tuple[str, int | None], list[_Share]] = {}
        for fd, _ in events:
            if fd in self._held:  # its replies wait: nothing more read until they went
                self._epoll.unregister(fd)
                self._muted.add(fd)
                continue
            client = self._parked[fd][0]
            try:
                read = client.reactor_read()
            except Exception as exc:  # noqa: BLE001 -- raised by the connection's own task
                client.reactor_raise(exc)
                read = Read.HAND_OVER
            if read is Read.WAIT:
                continue
            if read is Read.HAND_OVER:
                self._hand_over(fd)
                continue
            targets.setdefault((read.topic, read.partition), []).append((fd, client, read))
        if not targets:
            return
        self.turns += 1
        acked: list[_Share] = []
        self.appending = True
        try:
            for (topic, partition), group in targets.items():
                for part in parts(group):
                    self._append(topic, partition, part, acked)
        finally:
            self.appending = False
        woken, self._woken = self._woken, []
        for consumer in woken:
            if consumer.deliver_now():
                self.deliveries += 1
        for fd, client, _count in acked:
            try:
                client.reactor_send()
            except Exception as exc:  # noqa: BLE001 -- raised by the connection's own task
                client.reactor_raise(exc)
                self._hand_over(fd)

    def _append(
        self, topic: str, partition: int | None, group: list[_Share], acked: list[_Share]
    ) -> None:
        """Append one target's PUBs; queue each publisher's OKs (``acked``: who has them to
        send) or hold them for the followers, give back numbered PUBs that were not appended,
        or hand each publisher its own copy of the error."""
        admitted: list[bool] | None = None
        replicated: bool | Exception | None = True  # None: held for the followers
        held: list[_Share] = []
        try:
            if all(taken.numbering is None for _, _, taken in group):
                batch = join_batches([taken.batch for _, _, taken in group])
                records = self._broker.publish(topic, batch, partition)
            else:
                runs = [(taken.batch, taken.numbering) for _, _, taken in group]
                admitted, records = self._broker.publish_runs(topic, partition, runs)
            replicated = self._broker.publish_acks.when_replicated(
                topic, records, lambda failure: self._released(held, failure)
            )
        # As with the group commit: each publisher gets its own copy of the error to report
        # as if it had appended alone, and its own task goes on with it.
        except Exception as exc:  # noqa: BLE001
            replicated = exc
        if isinstance(replicated, Exception):  # not appended, or appended under a lost lead
            for fd, client, taken in group:
                client.reactor_failed(own_copy(replicated), taken)
                self._hand_over(fd)
            return
        if admitted is None or any(admitted):
            self.appends += 1
        for index, (fd, client, taken) in enumerate(group):
            if admitted is not None and not admitted[index]:
                client.reactor_return(taken)
                self._hand_over(fd)
            elif replicated is None:  # its OKs wait for the followers (:meth:`_released`)
                self._held[fd] = (client, records, taken)
                held.append((fd, client, taken))
            elif self._acked(fd, client, taken):
                acked.append((fd, client, taken))
        if held:
            self.holds += 1

    def _acked(self, fd: int, client: Client, taken: Taken) -> bool:
        """Queue ``client``'s OKs; False when that failed (it is handed back)."""
        self.publishes += taken.replies
        try:
            client.reactor_acked(taken)
        except Exception as exc:  # noqa: BLE001 -- raised by the connection's own task
            client.reactor_raise(exc)
            self._hand_over(fd)
            return False
        return True

    def _released(self, held: list[_Share], failure: Exception | None) -> None:
        """The followers hold the append ``held`` waited for (``failure``: they never will,
        the node no longer leads under its epoch): each publisher still held gets its OKs,
        sent now, and is polled again, or its own copy of the error and goes back to its
        task. Called by the task that moved the high-watermark; raises nothing."""
        for fd, client, taken in held:
            mine = self._held.get(fd)
            if mine is None or mine[0] is not client:
                continue  # gone meanwhile (its task cancelled, or handed back)
            del self._held[fd]
            if fd in self._muted:
                self._muted.discard(fd)
                self._epoll.register(fd, select.EPOLLIN)
            if failure is not None:
                client.reactor_failed(own_copy(failure), taken)
                self._hand_over(fd)
            elif self._acked(fd, client, taken):
                try:
                    client.reactor_send()
                except Exception as exc:  # noqa: BLE001 -- raised by the connection's task
                    client.reactor_raise(exc)
                    self._hand_over(fd)


def parts(group: list[_Share]) -> list[list[_Share]]:
    """``group`` cut into consecutive parts of at least :data:`APPEND_PART` messages (the last
    may hold fewer), each share whole, the order kept."""
    cut: list[list[_Share]] = []
    part: list[_Share] = []
    size = 0
    for share in group:
        part.append(share)
        size += len(share[2].batch)
        if size >= APPEND_PART:
            cut.append(part)
            part, size = [], 0
    if part:
        cut.append(part)
    return cut
