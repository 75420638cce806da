"""Clean shutdown checkpoints; retention deletes only what every channel consumed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from nsqd.broker import BrokerConfig, open_broker
from nsqd.storage.record import NewRecord
from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def test_sigterm_checkpoints_so_nothing_fined_comes_back(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        p = RawClient(daemon.tcp_address)
        p.send(*(Pub("clean", b"%d" % i) for i in range(100)))
        assert all(p.read().data == b"OK" for _ in range(100))
        c = RawClient(daemon.tcp_address)
        c.identify()
        c.send(Sub("clean", "ch"), Rdy(60))
        assert c.read().data == b"OK"
        for _ in range(60):
            c.send(Fin(c.read(skip_heartbeats=True).message_id))
        time.sleep(0.3)
        assert daemon.stop() == 0  # SIGTERM: checkpoint, exit 0
        daemon.start()
        c = RawClient(daemon.tcp_address)
        c.identify()
        c.send(Sub("clean", "ch"), Rdy(100))
        assert c.read().data == b"OK"
        bodies = [c.read(skip_heartbeats=True).body for _ in range(40)]
        assert sorted(bodies, key=int) == [b"%d" % i for i in range(60, 100)]
        c.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            c.read(skip_heartbeats=True)  # none of the 60 FINed ones
    finally:
        daemon.stop()


async def test_retention_deletes_only_consumed_old_segments(tmp_path: Path) -> None:
    config = BrokerConfig(
        data_path=tmp_path, max_bytes_per_file=2000, retention=0.0, retention_check_interval=3600
    )
    async with open_broker(config) as broker:
        entries = [NewRecord(timestamp_ns=time.time_ns(), body=b"x" * 100) for _ in range(100)]
        broker.publish("ret", entries)
        topic = broker.get_topic("ret")
        log = topic.partitions[0].log
        assert broker.apply_retention(time.time_ns()) == 0  # no channel: kept for the first one

        class Client:
            def wake(self) -> None: ...
            def message_timed_out(self) -> None: ...

        client = Client()
        channel = broker.subscribe("ret", "ch", client)
        now = time.time_ns()
        taken = channel.take(60, client, now + 10**10, now)
        for record in taken.records:
            broker.finish(channel, record.internal_id.to_bytes(8, "big") + bytes(8), client)
        deleted = broker.apply_retention(time.time_ns())
        assert deleted > 0
        assert 0 < log.start_offset <= 60  # whole segments only, none past the cursor
        assert log.end_offset == 100
        rest = channel.take(100, client, now + 10**10, time.time_ns())
        assert [r.offset for r in rest.records] == list(range(60, 100))
        await trio.sleep(0)
