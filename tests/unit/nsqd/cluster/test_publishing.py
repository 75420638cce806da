"""The one publish path on a lone node: appended here, acknowledgeable once it returns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nsqd.broker import BrokerConfig, NewRecord, Record, new_records, open_broker
from nsqd.cluster.publishing import PublishPath


async def test_a_stock_publish_without_forwarder_is_appended_here(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        path = PublishPath(broker)
        seen: list[Sequence[Record]] = []
        records = await path.publish_stock(
            "t", new_records(1, [b"a", b"b"]), None, on_appended=seen.append
        )
        assert records is not None
        assert [r.body for r in records] == [b"a", b"b"]
        assert seen == [records]


async def test_store_then_replicated_is_the_same_path(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        path = PublishPath(broker)
        batch = new_records(1, [b"x"])

        async def append() -> Sequence[Record]:
            return broker.publish("t", batch, None)

        records = await path.store("t", None, batch.bodies, append)
        assert records is not None
        await path.replicated("t", records, durable=False)
        partial = await path.publish("t", [NewRecord(2, b"y", trace_id=7)], 0)
        assert [(r.body, r.trace_id) for r in partial] == [(b"y", 7)]
