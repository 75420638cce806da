"""A batch of bodies encoded as log records (:data:`~.record.RECORD_HEADER`) without a
:class:`~.record.Record` each: an MPUB's, a turn's PUBs, a numbered run's with their producer
stamps (:mod:`.stamp`). The layouts are :mod:`.record`'s; the loops here are the append
path's hottest, written out per kind of batch (every branch and temporary in them is paid once
per message).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import count
from typing import Final

from .record import (
    _COVERED,
    _FORMAT_BITS,
    _PREFIX,
    CONCATENATED_MAX,
    HEADER_SIZE,
    LENGTH_SIZE,
    _add_uncopied,
    _crc,
    _pack_covered,
    _pack_prefix,
)
from .stamp import HEADED_STAMP, STAMP_SIZE, Stamps

#: the covered half's fields that every record of a batch shares (trace_id: none, its
#: deliver_at_ns, epoch and ext_len), packed once a batch: :data:`_BATCH_COVERED` takes them
#: as one field (a field packed from bytes costs less than four from ints, on every record)
_SHARED: Final = struct.Struct(">" + _COVERED.format[4:])
#: the covered half as a batch's loop packs it: each record's own fields (offset,
#: timestamp_ns, internal_id), then the shared ones (:data:`_SHARED`'s bytes)
_BATCH_COVERED: Final = struct.Struct(f"{_COVERED.format[:4]}{_SHARED.size}s")
assert _BATCH_COVERED.size == _COVERED.size
#: :data:`_BATCH_COVERED` with a producer stamp as its ext (:mod:`.stamp`), packed in the same
#: call from the stamp's head and its number's bottom half (:class:`~.stamp.Stamps`)
_NUMBERED: Final = struct.Struct(_BATCH_COVERED.format + HEADED_STAMP.format.lstrip(">"))
_pack_batch_covered: Final = _BATCH_COVERED.pack
_pack_numbered: Final = _NUMBERED.pack
_pack_shared: Final = _SHARED.pack


def encode_bodies(
    first_offset: int,
    id_base: int,
    timestamps: Sequence[int],
    deliver_at_ns: int,
    epoch: int,
    bodies: Sequence[bytes],
    exts: Sequence[bytes] | None = None,
) -> tuple[bytes, list[tuple[int, int]]]:
    """:func:`encode_run` of the records of one batch (:class:`~.batch.AppendedBatch`): body
    ``i``, at offset ``first_offset + i``, gets internal id ``id_base | (first_offset + i + 1)``
    and publish time ``timestamps[i]``; all share ``deliver_at_ns`` and ``epoch`` and have no
    trace id, and no ext unless ``exts`` gives each one (producer stamps). Made from the
    bodies, without a :class:`Record` each. Raises ``ValueError`` as :func:`encode_run`."""
    if exts is not None:
        return _encode_with_exts(
            first_offset, id_base, timestamps, deliver_at_ns, epoch, bodies, exts
        )
    parts: list[bytes] = []
    add = parts.append
    stamps: list[tuple[int, int]] = []
    stamp = stamps.append
    pack_covered, pack_prefix, crc = _pack_batch_covered, _pack_prefix, _crc
    format_bits, header, length_size = _FORMAT_BITS, HEADER_SIZE, LENGTH_SIZE
    copied = CONCATENATED_MAX
    try:
        shared = _pack_shared(0, deliver_at_ns, epoch, 0)
        for offset, timestamp_ns, body in zip(count(first_offset), timestamps, bodies):
            covered = pack_covered(offset, timestamp_ns, id_base | (offset + 1), shared)
            size = header + len(body)
            field = format_bits | (size - length_size)
            if len(body) <= copied:
                rest = covered + body  # one CRC call: cheaper than two without the copy
                add(pack_prefix(field, crc(rest, field)))
                add(rest)
            else:
                _add_uncopied(add, field, covered, body)
            stamp((timestamp_ns, size))
    except struct.error as exc:
        raise ValueError(f"record field out of range: {exc}") from exc
    return b"".join(parts), stamps


def _encode_with_exts(
    first_offset: int,
    id_base: int,
    timestamps: Sequence[int],
    deliver_at_ns: int,
    epoch: int,
    bodies: Sequence[bytes],
    exts: Sequence[bytes],
) -> tuple[bytes, list[tuple[int, int]]]:
    """:func:`encode_bodies` of bodies that each have an ext: the producer stamps of a numbered
    run (:class:`~.stamp.Stamps`, packed with each header), or a list (a plain run joined with
    numbered ones: each stamp, or none)."""
    if isinstance(exts, Stamps):
        return _encode_numbered(
            first_offset, id_base, timestamps, deliver_at_ns, epoch, bodies, exts
        )
    parts: list[bytes] = []
    add = parts.append
    stamps: list[tuple[int, int]] = []
    stamp = stamps.append
    pack_covered, pack_prefix, crc = _pack_covered, _pack_prefix, _crc
    format_bits, length_size, prefix_size = _FORMAT_BITS, LENGTH_SIZE, _PREFIX.size
    try:
        for offset, timestamp_ns, body, ext in zip(
            count(first_offset), timestamps, bodies, exts, strict=False
        ):
            covered = (
                pack_covered(
                    offset, timestamp_ns, id_base | (offset + 1), 0, deliver_at_ns, epoch, len(ext)
                )
                + ext
            )
            size = prefix_size + len(covered) + len(body)
            field = format_bits | (size - length_size)
            if len(body) <= CONCATENATED_MAX:
                rest = covered + body
                add(pack_prefix(field, crc(rest, field)))
                add(rest)
            else:
                _add_uncopied(add, field, covered, body)
            stamp((timestamp_ns, size))
    except struct.error as exc:  # includes an ext longer than MAX_EXT_LEN
        raise ValueError(f"record field out of range: {exc}") from exc
    return b"".join(parts), stamps


def _encode_numbered(
    first_offset: int,
    id_base: int,
    timestamps: Sequence[int],
    deliver_at_ns: int,
    epoch: int,
    bodies: Sequence[bytes],
    stamps: Stamps,
) -> tuple[bytes, list[tuple[int, int]]]:
    """:func:`_encode_with_exts` of a numbered run (every ext a producer stamp): each stamp's
    head and number packed with its record's header (:meth:`~.stamp.Stamps.columns`), no
    stamp made as bytes of its own."""
    parts: list[bytes] = []
    add = parts.append
    sizes: list[tuple[int, int]] = []
    size_of = sizes.append
    pack_numbered, pack_prefix, crc = _pack_numbered, _pack_prefix, _crc
    fixed = _PREFIX.size + _NUMBERED.size  # a record's size less its body
    format_bits = _FORMAT_BITS - LENGTH_SIZE  # the length field counts from after itself
    copied = CONCATENATED_MAX
    heads, bottoms = stamps.columns()
    try:
        shared = _pack_shared(0, deliver_at_ns, epoch, STAMP_SIZE)
        for offset, timestamp_ns, body, head, bottom in zip(
            count(first_offset), timestamps, bodies, heads, bottoms
        ):
            size = fixed + len(body)
            field = format_bits + size
            covered = pack_numbered(
                offset, timestamp_ns, id_base | (offset + 1), shared, head, bottom
            )
            if len(body) <= copied:
                rest = covered + body  # one CRC call: cheaper than two without the copy
                add(pack_prefix(field, crc(rest, field)))
                add(rest)
            else:
                _add_uncopied(add, field, covered, body)
            size_of((timestamp_ns, size))
    except struct.error as exc:
        raise ValueError(f"record field out of range: {exc}") from exc
    return b"".join(parts), sizes
