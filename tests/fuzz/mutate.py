"""The corpus and the mutator: recorded sessions cut into commands, mutated deterministically.

A *seed* is one recorded client->server byte stream (``corpus/*.bin``). V2 seeds are cut into
*units* (the magic, then one command with its body each; after an IDENTIFY that negotiated snappy
or deflate the compressed rest is one unit) and the offset of every 4-byte size field is kept,
so mutations can aim at the framing as well as at random bytes. HTTP seeds (``http-*.bin``) are
one unit; their ``Content-Length`` value is the size field.

An *input* is what one connection sends: a seed after one to four mutations (bit flip, byte set,
insert, insert a protocol token, delete, truncate, duplicate, unit drop/swap/repeat, splice with
another seed, size-field tweak), plus how the connection ends (half-close and wait for the server
to close, or a reset with SO_LINGER 0 after sending, or a reset right after connecting). The
same ``seed`` gives the same inputs in the same order.
"""

from __future__ import annotations

import json
import random
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

CORPUS = Path(__file__).with_name("corpus")

_SIZE = struct.Struct(">I")  # V2 body sizes: u32 BE after the command line
_BODY_COMMANDS = {
    b"IDENTIFY",
    b"AUTH",
    b"PUB",
    b"MPUB",
    b"DPUB",
    b"PUB_TRACE",
    b"MPUB_TRACE",
    b"PUB_EXT",
    b"MPUB_EXT",
}
_FIXED_ID = {b"FIN", b"REQ", b"TOUCH"}  # "<CMD> " + 16-byte binary id, then the rest of the line
_CONTENT_LENGTH = re.compile(rb"(?i)content-length: *(\d+)")

#: Byte strings a parser cares about, inserted whole.
TOKENS = [
    b" ",
    b"\n",
    b"\r\n",
    b"  V2",
    b"  V1",
    b"\x00",
    b"\xff",
    b"\x00\x00\x00\x00",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x00\x10\x00\x01",
    b"NOP\n",
    b"RDY 1\n",
    b"RDY 99999\n",
    b"CLS\n",
    b"SUB t c\n",
    b"SUB_ORDERED t c 0\n",
    b"PUB t\n\x00\x00\x00\x01x",
    b"MPUB t\n",
    b"IDENTIFY\n",
    b"AUTH\n",
    b"FIN ",
    b"REQ ",
    b"TOUCH ",
    b"#ephemeral",
    b"\r\n\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 99999999\r\n",
    b"Connection: keep-alive\r\n",
    b"?topic=t&binary=true",
    b"%00",
    b'{"snappy":true}',
    b'{"deflate":true,"deflate_level":9}',
]
#: Values written over a size field.
SIZES = [0, 1, 2, 3, 4, 5, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1024 * 1024 + 1, 5 * 1024 * 1024 + 1]


class Target(Enum):
    TCP = "tcp"
    HTTP = "http"


class Ending(Enum):
    """How the connection ends once the input is sent."""

    SHUT = "shut"  # shutdown(SHUT_WR), then read until the server closes
    RESET = "reset"  # SO_LINGER 0 + close right after sending: an RST
    RESET_EARLY = "reset-early"  # RST right after connecting, nothing or a few bytes sent


@dataclass(frozen=True)
class Seed:
    name: str
    target: Target
    units: list[bytes]
    sizes: list[tuple[int, int]]  # (unit index, offset in the unit) of each size field


@dataclass(frozen=True)
class Input:
    """One connection's worth of fuzz: where to send what, and how to end."""

    target: Target
    data: bytes
    ending: Ending
    origin: str  # seed name(s) and mutations, for the report and replay files

    def to_file(self, path: Path) -> None:
        path.write_bytes(self.data)
        meta = {"target": self.target.value, "ending": self.ending.value, "origin": self.origin}
        path.with_suffix(".json").write_text(json.dumps(meta) + "\n")

    @staticmethod
    def from_file(path: Path) -> Input:
        meta_path = path.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        target = Target(meta.get("target", "http" if path.name.startswith("http") else "tcp"))
        return Input(target, path.read_bytes(), Ending(meta.get("ending", "shut")), path.name)


def split_v2(data: bytes) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Cut a V2 client stream into units and find its size fields."""
    units, sizes = [data[:4]], []
    pos = 4
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            units.append(data[pos:])
            break
        name = data[pos:end].split(b" ", 1)[0]
        if name in _FIXED_ID:
            end = data.find(b"\n", pos + len(name) + 17)
            end = len(data) - 1 if end < 0 else end
        stop = end + 1
        if name in _BODY_COMMANDS and stop + 4 <= len(data):
            sizes.append((len(units), stop - pos))
            (size,) = _SIZE.unpack_from(data, stop)
            stop = min(len(data), stop + 4 + size)
        units.append(data[pos:stop])
        pos = stop
        if name == b"IDENTIFY" and _negotiates_compression(units[-1]):
            if pos < len(data):
                units.append(data[pos:])  # compressed from here on: one opaque unit
            break
    return units, sizes


def _negotiates_compression(unit: bytes) -> bool:
    try:
        body = json.loads(unit[unit.index(b"\n") + 5 :])
    except ValueError:
        return False
    return bool(body.get("snappy") or body.get("deflate"))


def load_corpus(directory: Path = CORPUS) -> list[Seed]:
    seeds = []
    for path in sorted(directory.glob("*.bin")):
        data = path.read_bytes()
        if path.name.startswith("http-"):
            seeds.append(Seed(path.stem, Target.HTTP, [data], []))
        else:
            units, sizes = split_v2(data)
            seeds.append(Seed(path.stem, Target.TCP, units, sizes))
    if not seeds:
        raise RuntimeError(f"no *.bin seeds in {directory}")
    return seeds


class Mutator:
    """Deterministic stream of :class:`Input` from the corpus and a seed."""

    def __init__(self, seeds: list[Seed], seed: int) -> None:
        self.seeds = seeds
        self.rng = random.Random(seed)
        self._by_target = {t: [s for s in seeds if s.target is t] for t in Target}
        self._unit_ops: list[Callable[[list[bytes], Seed], str]] = [
            self._drop,
            self._swap,
            self._repeat,
            self._splice,
            self._size,
        ]
        self._byte_ops: list[Callable[[bytearray], str]] = [
            self._flip,
            self._set,
            self._insert,
            self._token,
            self._delete,
            self._truncate,
            self._duplicate,
        ]

    def next_input(self) -> Input:
        rng = self.rng
        seed = rng.choice(self.seeds)
        units = list(seed.units)
        done = [seed.name]
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
            if rng.random() < 0.35:
                done.append(rng.choice(self._unit_ops)(units, seed))
            else:
                # aim at one unit (a command) more often than at the stream as a whole
                if len(units) > 1 and rng.random() < 0.7:
                    at = rng.randrange(1 if seed.target is Target.TCP else 0, len(units))
                    buf = bytearray(units[at])
                    done.append(rng.choice(self._byte_ops)(buf) + f"@u{at}")
                    units[at] = bytes(buf)
                else:
                    buf = bytearray(b"".join(units))
                    done.append(rng.choice(self._byte_ops)(buf))
                    units = [bytes(buf)]
        data = b"".join(units)
        roll = rng.random()
        if roll < 0.04:
            ending = Ending.RESET_EARLY
            data = data[: rng.choice((0, 0, 2, 4, 9))]
        elif roll < 0.15:
            ending = Ending.RESET
        else:
            ending = Ending.SHUT
        return Input(seed.target, data, ending, " ".join(done))

    # --- whole-unit mutations (the stream's structure) ---

    def _drop(self, units: list[bytes], seed: Seed) -> str:
        if len(units) > 1:
            del units[self.rng.randrange(len(units))]
        return "drop"

    def _swap(self, units: list[bytes], seed: Seed) -> str:
        if len(units) > 2:
            i, j = self.rng.sample(range(len(units)), 2)
            units[i], units[j] = units[j], units[i]
        return "swap"

    def _repeat(self, units: list[bytes], seed: Seed) -> str:
        at = self.rng.randrange(len(units))
        units[at:at] = [units[at]] * self.rng.choice((1, 1, 2, 10))
        return "repeat"

    def _splice(self, units: list[bytes], seed: Seed) -> str:
        other = self.rng.choice(self._by_target[seed.target])
        cut = self.rng.randrange(len(units) + 1)
        units[cut:] = other.units[self.rng.randrange(len(other.units)) :]
        return f"splice:{other.name}"

    def _size(self, units: list[bytes], seed: Seed) -> str:
        rng = self.rng
        if seed.target is Target.HTTP:
            buf = units[0] if len(units) == 1 else b"".join(units)
            value = rng.choice([*SIZES, len(buf) // 2, len(buf) * 2])
            units[:] = [_CONTENT_LENGTH.sub(f"Content-Length: {value}".encode(), buf, count=1)]
            return f"content-length={value}"
        if not seed.sizes or len(units) != len(seed.units):
            return "size:none"
        unit, offset = rng.choice(seed.sizes)
        if offset + 4 > len(units[unit]):
            return "size:gone"
        (old,) = _SIZE.unpack_from(units[unit], offset)
        value = rng.choice([*SIZES, old - 1, old + 1, old * 2]) & 0xFFFFFFFF
        buf = bytearray(units[unit])
        _SIZE.pack_into(buf, offset, value)
        units[unit] = bytes(buf)
        return f"size={value}@u{unit}"

    # --- byte mutations (on one unit or on the whole stream) ---

    def _flip(self, buf: bytearray) -> str:
        if buf:
            buf[self.rng.randrange(len(buf))] ^= 1 << self.rng.randrange(8)
        return "flip"

    def _set(self, buf: bytearray) -> str:
        if buf:
            buf[self.rng.randrange(len(buf))] = self.rng.choice(
                (0, 0xFF, 0x7F, 0x80, 0x20, 0x0A, 0x0D, self.rng.randrange(256))
            )
        return "set"

    def _insert(self, buf: bytearray) -> str:
        at = self.rng.randrange(len(buf) + 1)
        buf[at:at] = self.rng.randbytes(self.rng.randint(1, 8))
        return "insert"

    def _token(self, buf: bytearray) -> str:
        at = self.rng.randrange(len(buf) + 1)
        buf[at:at] = self.rng.choice(TOKENS)
        return "token"

    def _delete(self, buf: bytearray) -> str:
        if buf:
            at = self.rng.randrange(len(buf))
            del buf[at : at + self.rng.randint(1, 16)]
        return "delete"

    def _truncate(self, buf: bytearray) -> str:
        del buf[self.rng.randrange(len(buf) + 1) :]
        return "truncate"

    def _duplicate(self, buf: bytearray) -> str:
        if buf:
            at = self.rng.randrange(len(buf))
            piece = buf[at : at + self.rng.randint(1, 64)]
            to = self.rng.randrange(len(buf) + 1)
            buf[to:to] = piece
        return "duplicate"
