"""An MPUB body split with nsqd's checks: the same elements, or the same first error in nsqd's
words, as reading it element by element the way nsqd does."""

from __future__ import annotations

import struct

from hypothesis import given, strategies as st

from protocol.mpub import MpubFormatError, split_mpub_body


def nsqd_reading(body: bytes, max_msg: int, max_body: int) -> list[bytes] | str:
    """nsqd's readMPUB, one element at a time: the elements, or the error's text."""
    if len(body) < 4:
        return "MPUB failed to read message count"
    (count,) = struct.unpack_from(">i", body)
    if count <= 0 or count > (max_body - 4) // 5:
        return f"MPUB invalid message count {count}"
    out, at = [], 4
    for i in range(count):
        if at + 4 > len(body):
            return f"MPUB failed to read message({i}) body size"
        (size,) = struct.unpack_from(">i", body, at)
        if size <= 0:
            return f"MPUB invalid message({i}) body size {size}"
        if size > max_msg:
            return f"MPUB message too big {size} > {max_msg}"
        at += 4
        if at + size > len(body):
            return "MPUB failed to read message body"
        out.append(body[at : at + size])
        at += size
    return out


element = st.one_of(
    st.binary(min_size=1, max_size=12).map(lambda b: struct.pack(">i", len(b)) + b),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack(">i", n)),  # any size field
    st.binary(max_size=6),  # stray bytes
)


@given(count=st.integers(-2, 8), elements=st.lists(element, max_size=8), cut=st.integers(0, 6))
def test_a_body_splits_as_nsqd_reads_it(count: int, elements: list[bytes], cut: int) -> None:
    body = struct.pack(">i", count) + b"".join(elements)
    body = body[: len(body) - cut] if cut < len(body) else body
    expected = nsqd_reading(body, max_msg=10, max_body=4096)
    try:
        got: list[bytes] | str = split_mpub_body(body, max_msg_size=10, max_body_size=4096)
    except MpubFormatError as exc:
        got = str(exc)
    assert got == expected
