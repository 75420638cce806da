"""Hypothesis strategies for protocol V2: valid commands, consistent command streams, mutations.

Every command these strategies build is valid for nsqd/pnsq in the state it is drawn for, so
``encode_command`` followed by :class:`protocol.CommandParser` must give it back unchanged.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Sequence

from hypothesis import strategies as st

from protocol import (
    Auth,
    Cls,
    Command,
    ConnState,
    Dpub,
    Fin,
    Identify,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    ParserLimits,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubMode,
    Touch,
)

LIMITS = ParserLimits()

NAME_ALPHABET = string.ascii_letters + string.digits + "._-"
EPHEMERAL = "#ephemeral"

#: Topic and channel names: ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1..64 chars incl. the suffix.
names = st.one_of(
    st.text(NAME_ALPHABET, min_size=1, max_size=64),
    st.text(NAME_ALPHABET, min_size=1, max_size=64 - len(EPHEMERAL)).map(lambda s: s + EPHEMERAL),
    st.sampled_from(["a", "." * 64, "-", "_#ephemeral", "x" * (64 - len(EPHEMERAL)) + EPHEMERAL]),
)

#: Bytes that matter to a line parser, mixed into bodies and ids on purpose.
_TRICKY = [b" ", b"\n", b"\r", b"\r\n", b"  ", b"\x00", b"\xff", b"FIN ", b"PUB t\n", b"NOP\n"]

#: 16-byte binary message ids, often containing ``' '``, ``'\n'`` or ``'\r'``.
message_ids = st.one_of(
    st.binary(min_size=16, max_size=16),
    st.lists(st.sampled_from([*_TRICKY, b"a", b"0"]), min_size=16)
    .map(b"".join)
    .map(lambda b: b[:16]),
    st.sampled_from([b" " * 16, b"\n" * 16, b"\r" * 16, b"\r\n" * 8, b"0123456789abcdef"]),
)

#: Message bodies (never empty: nsqd refuses size 0), with spaces and newlines.
bodies = st.one_of(
    st.binary(min_size=1, max_size=200),
    st.lists(st.sampled_from([*_TRICKY, b"x"]), min_size=1, max_size=20).map(b"".join),
)

#: ``None`` (the client names no partition) or a youzan partition number.
partitions = st.one_of(st.none(), st.integers(0, 1023))

trace_ids = st.integers(0, 2**64 - 1)

#: SUB_ADVANCED consume-start specifications.
consume_starts = st.one_of(
    st.builds("timestamp:{}".format, st.integers(0, 2**40)),
    st.builds("msgcount:{}".format, st.integers(0, 2**40)),
    st.builds("virtual_queue:{}".format, st.integers(0, 2**40)),
    st.just("special:-1"),
)

identifies = st.builds(Identify, st.binary(min_size=1, max_size=200))
auths = st.builds(Auth, st.binary(min_size=1, max_size=64))
nops = st.just(Nop())
clses = st.just(Cls())


@st.composite
def subs(draw: st.DrawFn) -> Sub:
    """SUB, SUB_ORDERED and SUB_ADVANCED, with and without partition and consume start."""
    mode = draw(st.sampled_from(SubMode))
    partition = draw(partitions)
    start = None
    if mode is SubMode.ADVANCED and partition is not None:
        start = draw(st.none() | consume_starts)
    return Sub(draw(names), draw(names), partition, mode, start)


#: where a publish goes: no partition, a partition, or a partition and a number (pnsq's
#: idempotent publishing numbers only publishes that name their partition)
targets = st.one_of(
    st.tuples(st.none(), st.none()),
    st.tuples(st.integers(0, 1023), st.none() | st.integers(0, 2**63 - 1)),
)
pubs = st.builds(lambda n, b, t: Pub(n, b, *t), names, bodies, targets)
mpubs = st.builds(
    lambda n, b, t: Mpub(n, b, *t), names, st.lists(bodies, min_size=1, max_size=8), targets
)
dpubs = st.builds(
    lambda n, d, b, t: Dpub(n, d, b, *t),
    names,
    st.integers(0, LIMITS.max_req_timeout_ms),
    bodies,
    targets,
)
pub_traces = st.builds(lambda n, i, b, t: PubTrace(n, i, b, *t), names, trace_ids, bodies, targets)
mpub_traces = st.builds(
    lambda n, m, t: MpubTrace(n, m, *t),
    names,
    st.lists(st.tuples(trace_ids, bodies), min_size=1, max_size=8),
    targets,
)
pub_exts = st.builds(
    lambda n, h, b, t: PubExt(n, h, b, *t),
    names,
    st.binary(min_size=1, max_size=100),
    bodies,
    targets,
)
mpub_exts = st.builds(
    lambda n, m, t: MpubExt(n, m, *t),
    names,
    st.lists(st.tuples(st.binary(max_size=100), bodies), min_size=1, max_size=8),
    targets,
)
rdys = st.builds(Rdy, st.integers(0, LIMITS.max_rdy_count))
fins = st.builds(Fin, message_ids)
reqs = st.builds(Req, message_ids, st.integers(0, 10**12))
touches = st.builds(Touch, message_ids)

publishes = st.one_of(pubs, mpubs, dpubs, pub_traces, mpub_traces, pub_exts, mpub_exts)

#: (name, strategy, the state the command must be parsed in): one row per command type.
COMMANDS: Sequence[tuple[str, st.SearchStrategy[Command], ConnState]] = [
    ("IDENTIFY", identifies, ConnState.INIT),
    ("AUTH", auths, ConnState.INIT),
    ("SUB", subs(), ConnState.INIT),
    ("PUB", pubs, ConnState.INIT),
    ("MPUB", mpubs, ConnState.INIT),
    ("DPUB", dpubs, ConnState.INIT),
    ("PUB_TRACE", pub_traces, ConnState.INIT),
    ("MPUB_TRACE", mpub_traces, ConnState.INIT),
    ("PUB_EXT", pub_exts, ConnState.INIT),
    ("MPUB_EXT", mpub_exts, ConnState.INIT),
    ("RDY", rdys, ConnState.SUBSCRIBED),
    ("FIN", fins, ConnState.SUBSCRIBED),
    ("REQ", reqs, ConnState.SUBSCRIBED),
    ("TOUCH", touches, ConnState.SUBSCRIBED),
    ("FIN-closing", fins, ConnState.CLOSING),
    ("REQ-closing", reqs, ConnState.CLOSING),
    ("TOUCH-closing", touches, ConnState.CLOSING),
    ("CLS", clses, ConnState.SUBSCRIBED),
    ("NOP", nops, ConnState.INIT),
    ("NOP-subscribed", nops, ConnState.SUBSCRIBED),
]

_BY_STATE: dict[ConnState, st.SearchStrategy[Command]] = {
    ConnState.INIT: st.one_of(identifies, auths, subs(), publishes, nops),
    ConnState.SUBSCRIBED: st.one_of(rdys, fins, reqs, touches, clses, publishes, nops),
    # RDY after CLS is accepted and ignored: it produces no event
    ConnState.CLOSING: st.one_of(rdys, fins, reqs, touches, publishes, nops),
}


def commands_in(state: ConnState) -> st.SearchStrategy[Command]:
    """Any command nsqd accepts in ``state``."""
    return _BY_STATE[state]


def next_state(state: ConnState, command: Command) -> ConnState:
    """The parser state after ``command``."""
    if isinstance(command, Sub):
        return ConnState.SUBSCRIBED
    if isinstance(command, Cls):
        return ConnState.CLOSING
    return state


def produces_event(state: ConnState, command: Command) -> bool:
    """False for the one valid command the parser swallows: RDY while closing."""
    return not (state is ConnState.CLOSING and isinstance(command, Rdy))


@st.composite
def command_streams(draw: st.DrawFn, max_size: int = 10) -> tuple[list[Command], ConnState]:
    """A sequence of commands that is valid from a fresh connection, and the final state."""
    state = ConnState.INIT
    out: list[Command] = []
    for _ in range(draw(st.integers(0, max_size))):
        command = draw(commands_in(state))
        out.append(command)
        state = next_state(state, command)
    return out, state


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut into chunks at random points (empty chunks included)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


_MUTATION_TOKENS = [
    *_TRICKY,
    b"\x00\x00\x00\x00",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x00\x00\x00\x05",
    b"SUB t c\n",
    b"RDY 1\n",
    b"CLS\n",
    b"REQ ",
    b"TOUCH ",
    b"IDENTIFY\n",
]


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, inserted, deleted, or the stream truncated."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "token"]))
        at = draw(st.integers(0, len(buf)))
        if kind == "flip" and at < len(buf):
            buf[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del buf[at : at + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del buf[at:]
        else:
            buf[at:at] = draw(st.sampled_from(_MUTATION_TOKENS))
    return bytes(buf)
