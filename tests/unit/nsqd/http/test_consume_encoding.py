"""``/consume``'s batch encoder: byte for byte what ``go_json`` makes of the documented batch
document (docs/http-api.md), for any message fields and any token."""

from __future__ import annotations

import base64
import json

from hypothesis import given, strategies as st

from nsqd.broker.pull import Batch
from nsqd.core.inflight import Message
from nsqd.core.leases import Lease
from nsqd.http.base import go_json
from nsqd.http.consume import NO_BATCH, encode_batch
from nsqd.storage.record import Record
from protocol.message import MESSAGE_ID

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def document(batch: Batch | None) -> dict[str, object]:
    """The reply as a dict, as the API documents it (and as it was built before the encoder)."""
    if batch is None:
        return {"token": None, "partition": None, "messages": []}
    return {
        "token": batch.lease.token,
        "partition": batch.lease.partition,
        "messages": [
            {
                "id": MESSAGE_ID.pack(m.record.internal_id, m.record.trace_id).hex(),
                "partition": m.partition,
                "offset": m.offset,
                "timestamp": m.record.timestamp_ns,
                "attempts": m.attempts,
                "trace_id": m.record.trace_id,
                "body": base64.b64encode(m.record.body).decode("ascii"),
            }
            for m in batch.messages
        ],
    }


@st.composite
def messages(draw: st.DrawFn, partition: int) -> Message:
    record = Record(
        offset=draw(st.integers(min_value=0, max_value=2**62)),
        timestamp_ns=draw(U64),
        internal_id=draw(U64),
        trace_id=draw(U64),
        deliver_at_ns=0,
        body=draw(st.binary(max_size=300)),
        ext=b"",
    )
    message = Message(partition, record)
    message.attempts = draw(st.integers(min_value=0, max_value=65535))
    return message


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    partition = draw(st.integers(min_value=0, max_value=1023))
    lease = Lease(draw(st.text()), "t", "c", partition, 0)
    return Batch(lease, draw(st.lists(messages(partition), max_size=20)))


@given(batches())
def test_encoded_batch_is_go_json_of_the_document(batch: Batch) -> None:
    encoded = encode_batch(batch)
    assert encoded == go_json(document(batch))
    assert json.loads(encoded) == document(batch)


def test_no_batch() -> None:
    assert encode_batch(None) == NO_BATCH == go_json(document(None))


def test_token_with_html_characters_is_escaped_as_go_does() -> None:
    batch = Batch(Lease("a<b>&\u2028", "t", "c", 3, 0), [])
    assert encode_batch(batch) == (
        b'{"token":"a\\u003cb\\u003e\\u0026\\u2028","partition":3,"messages":[]}'
    )
