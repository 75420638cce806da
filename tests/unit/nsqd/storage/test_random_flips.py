"""Seeded random damage to a partition directory: one byte flipped at a random place of a random
file (a sealed or the current segment, an index), then the log reopened and read as a consumer
does. Whatever was hit, the log opens, no record comes back with a body other than the one
published at its offset, and every record whose bytes were not touched is delivered."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nsqd.storage import CacheBudget, NewRecord, PartitionLog
from nsqd.storage.layout import LOG_SUFFIX

COUNT = 240
MAX_BYTES = 12 * 1024  # several sealed segments and a current one


def _body(rng: random.Random, i: int) -> bytes:
    return b"%05d:" % i + rng.randbytes(rng.randrange(0, 300))


def _open(directory: Path) -> PartitionLog:
    return PartitionLog.open(
        directory, partition=1, max_bytes_per_file=MAX_BYTES, cache=CacheBudget(0)
    )


def _write(directory: Path, rng: random.Random) -> list[bytes]:
    log = _open(directory)
    bodies = [_body(rng, i) for i in range(COUNT)]
    i = 0
    while i < COUNT:  # batches of 1 to 8, as pipelined publishes append them
        n = rng.randrange(1, 9)
        log.append([NewRecord(timestamp_ns=j + 1, body=b) for j, b in enumerate(bodies[i : i + n])])
        i += n
    log.close()
    return bodies


def _record_spans(directory: Path) -> dict[int, tuple[str, int, int]]:
    """Offset -> (segment file name, first byte, end byte), from a clean log's reads."""
    spans: dict[int, tuple[str, int, int]] = {}
    for segment in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        base = int(segment.name[:20])
        data = segment.read_bytes()
        pos, offset = 0, base
        while pos < len(data):
            size = (int.from_bytes(data[pos : pos + 4], "big") & ((1 << 30) - 1)) + 4
            spans[offset] = (segment.name, pos, pos + size)
            pos += size
            offset += 1
    return spans


def _read_all(log: PartitionLog) -> dict[int, bytes]:
    got: dict[int, bytes] = {}
    offset = log.start_offset
    while offset < log.end_offset:
        records = log.read(offset, 13)
        assert records, f"empty read at {offset} below end {log.end_offset}"
        for r in records:
            assert r.offset not in got
            got[r.offset] = r.body
        offset = records[-1].offset + 1
    return got


def flip_and_check(directory: Path, seed: int) -> None:
    rng = random.Random(seed)
    bodies = _write(directory, rng)
    spans = _record_spans(directory)
    assert len(spans) == COUNT
    files = sorted(p for p in directory.iterdir() if p.stat().st_size)
    victim = rng.choice(files)
    data = bytearray(victim.read_bytes())
    at = rng.randrange(len(data))
    data[at] ^= 1 << rng.randrange(8)
    victim.write_bytes(bytes(data))
    touched = {
        o for o, (name, start, end) in spans.items() if name == victim.name and start <= at < end
    }

    log = _open(directory)
    got = _read_all(log)
    for offset, body in got.items():
        assert body == bodies[offset], f"seed {seed}: offset {offset} delivered a wrong body"
    missing = set(range(COUNT)) - set(got) - touched
    assert not missing, f"seed {seed}: {victim.name} byte {at}: lost untouched {sorted(missing)}"
    log.close()


@pytest.mark.parametrize("seed", range(40))
def test_a_random_flip_loses_only_what_it_touched(tmp_path: Path, seed: int) -> None:
    flip_and_check(tmp_path / "p", seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40, 1040))
def test_a_random_flip_loses_only_what_it_touched_soak(tmp_path: Path, seed: int) -> None:
    flip_and_check(tmp_path / "p", seed)
