"""CommandParser.fin_run: a run of FINs taken at once, as the general reader reads them."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import ClientError, ConnState, Fin, Nop, Rdy
from protocol.commands import FIN_COMMAND, FinRun
from tests.unit.protocol.parser_support import drain, parser_in


def test_a_run_of_fins_is_taken_at_once_and_anything_else_is_left_to_next_event() -> None:
    ids = [bytes([i]) * 8 + b" \n\r FIN\n" for i in range(3)]  # spaces and newlines in ids
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(
        b"".join(b"FIN " + i + b"\n" for i in ids) + b"FIN " + ids[0] + b"\r\nNOP\n"
    )
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == ids
    assert run.internal_ids() == [int.from_bytes(i[:8], "big") for i in ids]
    assert parser.fin_run() is None  # "\r\n": the general reader's
    assert drain(parser) == [Fin(ids[0]), Nop()]
    parser.receive_data(b"FIN " + ids[1][:10])  # incomplete: nothing yet
    assert parser.fin_run() is None
    parser.receive_data(ids[1][10:] + b"\n")
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == [ids[1]]
    assert len(run) == 1


def test_a_fin_run_stops_at_the_first_other_command_and_keeps_a_partial_fin() -> None:
    ids = [i.to_bytes(8, "big") + b"FIN \nFIN" for i in range(1, 5)]
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(
        b"FIN " + ids[0] + b"\nFIN " + ids[1] + b"\nRDY 5\nFIN " + ids[2] + b"\nFIN " + ids[3][:7]
    )
    run = parser.fin_run()
    assert run is not None
    assert run.internal_ids() == [1, 2]
    assert parser.fin_run() is None
    assert parser.next_event() == Rdy(5)
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == [ids[2]]
    assert parser.fin_run() is None  # the fourth is not complete yet
    parser.receive_data(ids[3][7:] + b"\n")
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == [ids[3]]


@given(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=40), st.data())
def test_a_fin_run_reads_what_one_fin_at_a_time_reads(
    ids: list[bytes], data: st.DataObject
) -> None:
    """Any split of a stream of FINs (ids full of spaces, newlines and "FIN ") gives the same
    ids, in order, as the general reader."""
    stream = b"".join(b"FIN " + i + b"\n" for i in ids)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    parser = parser_in(ConnState.SUBSCRIBED)
    seen: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        parser.receive_data(stream[start:end])
        while (run := parser.fin_run()) is not None:
            seen.extend(run.message_ids())
    assert seen == ids


def test_a_fin_run_needs_the_subscribed_state() -> None:
    parser = parser_in(ConnState.INIT)
    parser.receive_data(b"FIN " + b"a" * 16 + b"\n")
    assert parser.fin_run() is None
    with pytest.raises(ClientError) as raised:
        parser.next_event()
    assert raised.value.text == "E_INVALID cannot FIN in current state"


@given(st.lists(st.integers(0, 2**64 - 1), max_size=2_100), st.integers(0, 2**64 - 1))
def test_a_runs_internal_ids_are_each_fins_first_8_bytes_whatever_its_length(
    ids: list[int], trace: int
) -> None:
    data = b"".join(FIN_COMMAND.pack(b"FIN ", i, trace.to_bytes(8, "big"), b"\n") for i in ids)
    assert FinRun(data).internal_ids() == ids


@pytest.mark.parametrize("count", [1_023, 1_024, 1_025, 3_000])
def test_long_runs_are_read_whole(count: int) -> None:
    ids = [(7 << 50) | s for s in range(count)]
    data = b"".join(FIN_COMMAND.pack(b"FIN ", i, bytes(8), b"\n") for i in ids)
    assert FinRun(data).internal_ids() == ids
