"""The decoded size of an Arrow IPC file (``.arrow``), read from its message headers before any
body is decoded: a few KB of zstd or lz4 buffers can decode to gigabytes, and the size on disk
says nothing of that.

The Arrow IPC format (https://arrow.apache.org/docs/format/Columnar.html#serialization-and-interprocess-communication-ipc)
is a sequence of encapsulated messages: an optional continuation marker ``0xFFFFFFFF``, the
int32 length of a flatbuffer ``Message``, the message, then ``bodyLength`` bytes of body. A
``RecordBatch`` (or the record batch of a ``DictionaryBatch``) lists its body buffers as
``(offset, length)`` structs; with ``compression`` set, each non-empty buffer starts with its
uncompressed length as an int64 (``-1``: stored uncompressed). The file format is the same
stream after the 8 bytes ``ARROW1\\0\\0`` (its footer is not needed).

Only the few flatbuffer fields on that path are read (``Message``: header type, header, body
length; ``RecordBatch``: length, buffers, compression), every offset bounds-checked: a file
that does not parse raises :class:`ValueError`, which the caller reports as unreadable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["ArrowSize", "arrow_decoded_size"]

_CONTINUATION = 0xFFFFFFFF
_FILE_MAGIC = b"ARROW1\x00\x00"
_DICTIONARY_BATCH = 2
_RECORD_BATCH = 3
#: A message header is a few hundred bytes per column; more than this is not an Arrow file.
_MAX_METADATA = 64 << 20


class _Table:
    """A flatbuffer table at ``pos`` of ``buf`` (bounds-checked reads)."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        vt = pos - self._unpack("i", pos)
        self.vt = vt
        self.vt_size = self._unpack("H", vt)
        if self.vt_size < 4 or vt + self.vt_size > len(buf):
            raise ValueError("a flatbuffer vtable out of range")

    def _check(self, at: int, n: int) -> None:
        if at < 0 or at + n > len(self.buf):
            raise ValueError("a flatbuffer offset out of range")

    def _unpack(self, fmt: str, at: int) -> int:
        """The little-endian scalar ``fmt`` (a struct code) at ``at``."""
        self._check(at, struct.calcsize(fmt))
        return int(struct.unpack_from("<" + fmt, self.buf, at)[0])

    def _field(self, slot: int) -> int | None:
        """The absolute position of field ``slot``, or None when it is absent."""
        at = 4 + 2 * slot
        if at + 2 > self.vt_size:
            return None
        off = self._unpack("H", self.vt + at)
        return None if off == 0 else self.pos + off

    def scalar(self, slot: int, fmt: str, default: int) -> int:
        at = self._field(slot)
        return default if at is None else self._unpack(fmt, at)

    def table(self, slot: int) -> _Table | None:
        at = self._field(slot)
        return None if at is None else _Table(self.buf, at + self._unpack("I", at))

    def structs(self, slot: int, size: int) -> list[bytes]:
        """A vector of ``size``-byte structs."""
        at = self._field(slot)
        if at is None:
            return []
        vec = at + self._unpack("I", at)
        n = self._unpack("I", vec)
        self._check(vec + 4, n * size)
        return [self.buf[vec + 4 + i * size : vec + 4 + (i + 1) * size] for i in range(n)]


@dataclass
class ArrowSize:
    """What :func:`arrow_decoded_size` found: bytes the record batches decode to and rows."""

    decoded: int = 0
    rows: int = 0


def _read(fh: BinaryIO, n: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise ValueError("the Arrow stream ends inside a message")
    return data


def _batch_size(fh: BinaryIO, body_start: int, batch: _Table) -> tuple[int, int]:
    """(decoded bytes, rows) of one record batch, reading the 8-byte prefixes of a compressed
    body's buffers only."""
    rows = batch.scalar(0, "q", 0)
    buffers = [struct.unpack("<qq", b) for b in batch.structs(2, 16)]
    compressed = batch.table(3) is not None
    total = 0
    for offset, length in buffers:
        if offset < 0 or length < 0:
            raise ValueError("a negative buffer offset or length")
        if not compressed or length == 0:
            total += length
            continue
        if length < 8:
            raise ValueError("a compressed buffer shorter than its length prefix")
        fh.seek(body_start + offset)
        (plain,) = struct.unpack("<q", _read(fh, 8))
        total += length - 8 if plain == -1 else plain
        if plain < -1:
            raise ValueError("a negative uncompressed length")
    return total, rows


def arrow_decoded_size(path: Path, stop_after_rows: int | None = None) -> ArrowSize:
    """The bytes every record batch of the Arrow IPC file ``path`` decodes to (buffers' sizes,
    uncompressed) and its rows, without decoding anything; with ``stop_after_rows``, the
    batches up to the one that reaches that many rows. Raises :class:`ValueError` for a file
    that is not Arrow IPC."""
    size = ArrowSize()
    end = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(8) != _FILE_MAGIC:
            fh.seek(0)
        while fh.tell() + 4 <= end:
            (n,) = struct.unpack("<I", _read(fh, 4))
            if n == _CONTINUATION:
                (n,) = struct.unpack("<I", _read(fh, 4))
            if n == 0:  # end of stream
                break
            if n > _MAX_METADATA:
                raise ValueError(f"a message header of {n} bytes")
            meta = _read(fh, n)
            message = _Table(meta, struct.unpack_from("<I", meta, 0)[0])
            kind = message.scalar(1, "B", 0)
            body = message.scalar(3, "q", 0)
            start = fh.tell()
            if body < 0 or start + body > end:
                raise ValueError("a message body past the end of the file")
            header = message.table(2)
            if kind == _DICTIONARY_BATCH and header is not None:
                header = header.table(1)
            if kind in (_RECORD_BATCH, _DICTIONARY_BATCH) and header is not None:
                decoded, rows = _batch_size(fh, start, header)
                size.decoded += decoded
                size.rows += rows if kind == _RECORD_BATCH else 0
            fh.seek(start + body)
            if stop_after_rows is not None and size.rows >= stop_after_rows:
                break
    return size
