"""The Spark source's plain parts without Spark or daemons: options, the lookupd answer, the
row columns, trace id conversion, MPUB_TRACE batching."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from pnsq.client.routing import chunk_traced
from pnsq.spark.nodes import _parse_lookup
from pnsq.spark.options import (
    COLUMNS,
    SCHEMA,
    Endpoints,
    OptionError,
    read_options,
    write_options,
)
from pnsq.spark.planning import PlanningError
from pnsq.spark.reading import columns, signed64, unsigned64
from protocol.range_read import RangeRecord


def test_read_options_parse_spark_style_names_case_insensitively() -> None:
    opts = read_options(
        {
            "nsqd": "127.0.0.1:4151, http://10.0.0.2:4151/",
            "topic": "events",
            "STARTINGOFFSETS": '{"0": 5}',
            "endingOffsets": "latest",
            "startingTimestamp": "1700000000000",
            "maxOffsetsPerTrigger": "100",
            "minPartitions": "8",
            "failOnDataLoss": "False",
            "fetchSize": "50000",
            "requestTimeoutMs": "2500",
            "checkpointLocation": "/ignored",
        }
    )
    assert opts.endpoints == Endpoints(nsqd=("127.0.0.1:4151", "10.0.0.2:4151"), timeout=2.5)
    assert (opts.topic, opts.starting_offsets, opts.ending_offsets) == (
        "events",
        '{"0": 5}',
        "latest",
    )
    assert opts.starting_timestamp == 1_700_000_000_000
    assert opts.ending_timestamp is None
    assert (opts.max_offsets_per_trigger, opts.min_partitions) == (100, 8)
    assert opts.fail_on_data_loss is False
    assert opts.fetch_size == 10_000  # nsqd's cap


def test_read_option_defaults() -> None:
    opts = read_options({"lookupd": "127.0.0.1:4161", "topic": "t"})
    assert opts.endpoints.lookupd == ("127.0.0.1:4161",)
    assert opts.endpoints.nsqd == ()
    assert opts.endpoints.auth_secret == ""  # no Authorization header
    secret = read_options({"lookupd": "127.0.0.1:4161", "topic": "t", "authSecret": "s3"})
    assert secret.endpoints.auth_secret == "s3"
    assert opts.starting_offsets is None
    assert opts.ending_offsets == "latest"
    assert opts.max_offsets_per_trigger is None
    assert opts.fail_on_data_loss is True


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t"}, "exactly one of"),
        ({"topic": "t", "nsqd": "a:1", "lookupd": "b:2"}, "exactly one of"),
        ({"nsqd": "a:1"}, "topic is required"),
        ({"nsqd": "nohost", "topic": "t"}, "HOST:PORT"),
        ({"nsqd": "a:1", "topic": "t", "maxOffsetsPerTrigger": "x"}, "integer"),
        ({"nsqd": "a:1", "topic": "t", "maxOffsetsPerTrigger": "0"}, ">= 1"),
        ({"nsqd": "a:1", "topic": "t", "failOnDataLoss": "maybe"}, "true or false"),
    ],
)
def test_bad_read_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        read_options(options)
    assert issubclass(OptionError, PlanningError)


def test_write_options() -> None:
    opts = write_options({"nsqd": "a:1", "topic": "out", "batchSize": "250"})
    assert (opts.topic, opts.batch_size, opts.batch_bytes) == ("out", 250, 4 * 1024 * 1024)
    with pytest.raises(OptionError, match=">= 1024"):
        write_options({"nsqd": "a:1", "topic": "out", "batchBytes": "10"})


def peer(host: str, http_port: int) -> dict[str, object]:
    return {"broadcast_address": host, "tcp_port": http_port - 1, "http_port": http_port}


def test_lookup_answer_with_youzans_partition_map() -> None:
    doc = {
        "channels": [],
        "producers": [peer("10.0.0.1", 4151), peer("10.0.0.2", 4151)],
        "partitions": {"0": peer("10.0.0.2", 4151), "1": peer("10.0.0.1", 4151)},
    }
    assert _parse_lookup(doc) == (
        ["10.0.0.1:4151", "10.0.0.2:4151"],
        {0: "10.0.0.2:4151", 1: "10.0.0.1:4151"},
    )


def test_lookup_answer_of_a_stock_lookupd() -> None:
    doc = {"channels": [], "producers": [peer("::1", 4151), peer("h", 5151)]}
    assert _parse_lookup(doc) == (["[::1]:4151", "h:5151"], {})
    assert _parse_lookup({"producers": [], "partitions": {}}) == ([], {})
    with pytest.raises(PlanningError):
        _parse_lookup({"producers": [{"broadcast_address": "h"}]})
    with pytest.raises(PlanningError):
        _parse_lookup(["not", "a", "lookup"])


def test_columns_match_the_schema() -> None:
    assert [part.split()[0] for part in SCHEMA.split(", ")] == list(COLUMNS)
    records = [
        RangeRecord(7, 1_700_000_000_123_456_789, (2 << 50) + 8, 0, 0, b"x"),
        RangeRecord(8, 1_700_000_000_500_000_000, (2 << 50) + 9, 2**64 - 2, 0, b"y", b'{"a":1}'),
    ]
    cols = columns("t", 2, records)
    assert len(cols) == len(COLUMNS)
    assert cols[:4] == [["t", "t"], [2, 2], [7, 8], [1_700_000_000_123_456, 1_700_000_000_500_000]]
    assert cols[4] == [r.message_id for r in records]
    assert all(len(i) == 16 for i in cols[4])
    assert cols[5:] == [[0, -2], [b"x", b"y"], [None, '{"a":1}']]


@given(st.integers(0, 2**64 - 1))
def test_trace_ids_round_trip_through_a_signed_long(trace_id: int) -> None:
    as_long = signed64(trace_id)
    assert -(2**63) <= as_long < 2**63
    assert unsigned64(as_long) == trace_id


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40), st.integers(64, 2000))
def test_traced_batches_keep_order_and_size(bodies: list[bytes], limit: int) -> None:
    messages = [(i, body) for i, body in enumerate(bodies)]
    chunks = chunk_traced(messages, limit)
    assert [m for chunk in chunks for m in chunk] == messages
    for chunk in chunks:
        assert len(chunk) == 1 or 4 + sum(len(b) + 12 for _, b in chunk) <= limit
