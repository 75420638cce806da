"""The codecs of nsqd's compressed connections, sans I/O: bytes in, bytes out.

* Snappy: the *framing format* (golang/snappy ``NewReader``/``NewWriter``, what nsqd, go-nsq and
  pynsq speak), built on cramjam's raw snappy block codec. A stream starts with the stream
  identifier chunk ``ff 06 00 00 "sNaPpY"``; data travels in compressed (0x00) or uncompressed
  (0x01) chunks of at most 64 KiB, each with the masked CRC-32C of its uncompressed bytes.
  pynsq starts every send with a new compressor, so a stream identifier may come again at any
  chunk boundary; skippable chunks (0x80-0xfe) are skipped, reserved ones (0x02-0x7f) are errors.
* Deflate: raw DEFLATE (RFC 1951, no zlib header, ``wbits=-15``); every encode ends in a sync
  flush (``00 00 ff ff``) so the peer can decode everything sent so far, like Go's
  ``flate.Writer.Flush``.

Every ``encode`` call produces one self-contained piece of the stream: the session compresses
once per output flush, never per frame.

Errors: :class:`CompressionError` for input that is not a valid stream (nsqd closes the
connection: ``snappy: corrupt input``, ``flate: corrupt input``).
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import cramjam
import crc32c

STREAM_IDENTIFIER: Final = b"\xff\x06\x00\x00sNaPpY"
MAX_BLOCK: Final = 65536  # uncompressed bytes per chunk (golang/snappy maxBlockSize)
_MAX_ENCODED: Final = 32 + MAX_BLOCK + MAX_BLOCK // 6  # snappy.MaxEncodedLen(maxBlockSize)
_CHUNK_HEADER: Final = struct.Struct("<I")  # [u8 type][u24 LE length], read as one u32 LE
_CRC: Final = struct.Struct("<I")
_COMPRESSED, _UNCOMPRESSED, _STREAM_ID = 0x00, 0x01, 0xFF
_FIRST_SKIPPABLE: Final = 0x80  # 0x80-0xfd skippable, 0xfe padding: both ignored


class CompressionError(ValueError):
    """The peer sent bytes that do not decode."""


def masked_crc(data: bytes | memoryview) -> int:
    """The framing format's checksum: CRC-32C, rotated right by 15 bits, plus a constant."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class SnappyEncoder:
    """Framing-format writer for one direction of a connection."""

    def __init__(self) -> None:
        self._started = False

    def encode(self, data: bytes | bytearray | memoryview) -> bytes:
        """Chunks for ``data`` (the stream identifier first, on the first call)."""
        out = bytearray()
        if not self._started:
            out += STREAM_IDENTIFIER
            self._started = True
        view = memoryview(data)
        for start in range(0, len(view), MAX_BLOCK):
            block = view[start : start + MAX_BLOCK]
            compressed = cramjam.snappy.compress_raw(block)
            kind, payload = (
                (_COMPRESSED, memoryview(compressed))
                if len(compressed) < len(block) - len(block) // 8  # golang/snappy's rule
                else (_UNCOMPRESSED, block)
            )
            out += _CHUNK_HEADER.pack((len(payload) + 4) << 8 | kind)
            out += _CRC.pack(masked_crc(block))
            out += payload
        return bytes(out)


class SnappyDecoder:
    """Framing-format reader: feed any split of the stream, get the bytes decoded so far."""

    #: a snappy chunk decodes to 64 KiB at most, so one read's output is bounded already
    pending = False

    def __init__(self) -> None:
        self._pending = b""
        self._started = False

    def decode(self, data: bytes | bytearray) -> bytes:
        """Decode every whole chunk buffered; keep a partial one for the next call.

        Raises:
            CompressionError: bad chunk type, size, checksum or snappy block.
        """
        buf = self._pending + data if self._pending else bytes(data)
        view = memoryview(buf)
        out = bytearray()
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (header,) = _CHUNK_HEADER.unpack_from(buf, pos)
            kind, length = header & 0xFF, header >> 8
            if (
                (kind != _STREAM_ID and not self._started)  # the stream identifier comes first
                or (kind == _STREAM_ID and length != 6)
                or (kind in (_COMPRESSED, _UNCOMPRESSED) and not 4 <= length <= _MAX_ENCODED + 4)
            ):
                raise CompressionError("snappy: corrupt input")
            if _UNCOMPRESSED < kind < _FIRST_SKIPPABLE:
                raise CompressionError("snappy: unsupported input")  # reserved unskippable
            if pos + 4 + length > end:
                break
            chunk = view[pos + 4 : pos + 4 + length]
            pos += 4 + length
            if kind == _STREAM_ID:
                if bytes(chunk) != STREAM_IDENTIFIER[4:]:
                    raise CompressionError("snappy: corrupt input")
                self._started = True
            elif kind == _COMPRESSED:
                out += self._block(chunk)
            elif kind == _UNCOMPRESSED:
                block = chunk[4:]
                if len(block) > MAX_BLOCK or _CRC.unpack_from(chunk)[0] != masked_crc(block):
                    raise CompressionError("snappy: corrupt input")
                out += block
            # else skippable (0x80-0xfd) or padding (0xfe): ignored
        self._pending = buf[pos:] if pos < end else b""
        return bytes(out)

    @staticmethod
    def _block(chunk: memoryview) -> bytes:
        encoded = chunk[4:]
        try:
            if cramjam.snappy.decompress_raw_len(encoded) > MAX_BLOCK:
                raise CompressionError("snappy: corrupt input")
            block = bytes(cramjam.snappy.decompress_raw(encoded))
        except cramjam.DecompressionError as exc:
            raise CompressionError("snappy: corrupt input") from exc
        if _CRC.unpack_from(chunk)[0] != masked_crc(block):
            raise CompressionError("snappy: corrupt input")
        return block


class DeflateEncoder:
    """Raw DEFLATE at ``level``; each encode ends with a sync flush."""

    def __init__(self, level: int) -> None:
        self._z = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)

    def encode(self, data: bytes | bytearray | memoryview) -> bytes:
        z = self._z
        return z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)


class DeflateDecoder:
    """Raw DEFLATE reader for any split of the stream, ``max_output`` bytes per call at most.

    DEFLATE expands up to ~1000 times: without the bound one 64 KiB read of zeros would decode
    into ~64 MiB at once. Input not yet decoded waits (:attr:`pending`) for the next call.
    """

    def __init__(self, max_output: int = 256 * 1024) -> None:
        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        self._max_output = max_output

    @property
    def pending(self) -> bool:
        """Whether input is left that the next :meth:`decode` (even of ``b""``) decodes."""
        return bool(self._z.unconsumed_tail)

    def decode(self, data: bytes | bytearray) -> bytes:
        """The next decoded bytes (at most ``max_output``). Raises :class:`CompressionError`
        on a corrupt stream."""
        z = self._z
        if z.unconsumed_tail:
            data = z.unconsumed_tail + data
        try:
            return z.decompress(data, self._max_output)
        except zlib.error as exc:
            raise CompressionError("flate: corrupt input") from exc
