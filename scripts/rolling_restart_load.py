"""scripts/rolling-restart's publish load (rolling_restart.py): numbered messages published
through pnsq's client, partition-aware through lookupd, one every interval, from a thread of
its own; a failed publish is counted, the partitions looked up again and the same message
published again."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from pnsq.client import open_producer
from pnsq.client.retry import RETRIED, retryable


@dataclass
class Load:
    """What the publisher saw: the acknowledged message numbers, the longest time between two
    acknowledgements, and the failed attempts (each followed by a retry of the same message)."""

    acked: list[int] = field(default_factory=list)
    failed: int = 0
    last_failure: str = ""
    longest_gap: float = 0.0
    longest_gap_ended: float = 0.0  # when the longest gap ended (time.monotonic())
    last_ack: float | None = None

    def ack(self, number: int, now: float) -> None:
        if self.last_ack is not None and now - self.last_ack > self.longest_gap:
            self.longest_gap, self.longest_gap_ended = now - self.last_ack, now
        self.last_ack = now
        self.acked.append(number)

    def fail(self, error: BaseException) -> None:
        self.failed += 1
        self.last_failure = f"{type(error).__name__}: {error}"


def body(number: int) -> bytes:
    return b"%012d" % number


async def publish(
    load: Load, seed: str, lookupd: str, topic: str, interval: float, stop: threading.Event
) -> None:
    """Publish numbered messages to ``topic`` until ``stop``, one every ``interval`` s."""
    async with open_producer(seed, lookupd_http_address=lookupd, max_attempts=1) as producer:
        number = 0
        while not stop.is_set():
            try:
                with trio.fail_after(5):
                    await producer.publish(topic, body(number))
            except (*RETRIED, trio.TooSlowError) as exc:
                if not isinstance(exc, trio.TooSlowError) and not retryable(exc):
                    raise
                load.fail(exc)
                await trio.sleep(interval)
                try:
                    await producer.partitions(topic)  # the leaders, looked up again
                except RETRIED as lookup_error:
                    load.fail(lookup_error)
                continue
            load.ack(number, time.monotonic())
            number += 1
            await trio.sleep(interval)


class Publisher:
    """:func:`publish` in a thread of its own, started and stopped by the restart sequence."""

    def __init__(self, seed: str, lookupd: str, topic: str, interval: float) -> None:
        self.load = Load()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        args = (self.load, seed, lookupd, topic, interval, self.stop_event)
        self.thread = threading.Thread(target=self._run, args=args, daemon=True)

    def _run(self, *args: Any) -> None:
        try:
            trio.run(publish, *args)
        except BaseException as exc:  # noqa: BLE001 (carried to the main thread by stop())
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> Load:
        self.stop_event.set()
        self.thread.join(30)
        if self.error is not None:
            raise RuntimeError(f"the publisher stopped: {self.error!r}") from self.error
        return self.load
