"""Reading a serialized ONNX model from its protobuf wire format, before the full parse: the
nodes counted (a model over the node cap is refused without building its message tree, which
costs far more memory than the file: a few hundred bytes per node) and, for a reader that
needs no weight values, the model's bytes without the data of its large initializers.

The file is read with positioned reads (``os.pread``), never memory-mapped: a file truncated
by another process while it is read is :class:`FileChangedError` (a mapping would die of
SIGBUS), and so is a file whose size changed by the end of the read.

The wire format (protobuf encoding): each field is a varint tag ``field_number << 3 |
wire_type``, then a varint (type 0), 8 bytes (type 1), a varint length and that many bytes
(type 2) or 4 bytes (type 5). Only length-delimited fields on the way to a node are entered:
ModelProto.graph (7) and .functions (25), GraphProto.node (1), FunctionProto.node (7),
NodeProto.attribute (5), AttributeProto.g (6) and .graphs (11). Everything else is skipped by
its length, so the count touches the node bytes only. Malformed bytes end the count (the
parser then reports the file).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileChangedError", "ModelBytes", "count_nodes", "read_model_bytes"]

_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE, _GRAPH_INITIALIZER, _FUNCTION_NODE = 1, 5, 7
_NODE_ATTRIBUTE = 5
_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS = 6, 11
#: TensorProto's value fields: float_data, int32_data, string_data, int64_data, raw_data,
#: double_data, uint64_data (dims, data_type, name, external_data... are kept).
_TENSOR_DATA = frozenset({4, 5, 6, 7, 9, 10, 11})

#: Bytes read from the file at a time while walking its fields.
WINDOW_BYTES = 1 << 20


class _Over(Exception):
    pass


class _Bad(Exception):
    pass


class FileChangedError(Exception):
    """The file no longer has the size it had when opened: another process truncated (or
    rewrote) it while it was read. The message says the sizes and where."""


class _Source:
    """The bytes of an open file, read in windows of :data:`WINDOW_BYTES` by ``os.pread``
    (or held whole: ``data``); a read the file cannot fill is :class:`FileChangedError`."""

    def __init__(self, fd: int, size: int, data: bytes | bytearray | None = None) -> None:
        self.fd, self.size = fd, size
        self.win: bytes | bytearray = b"" if data is None else data
        self.at = 0

    def _load(self, i: int, n: int) -> None:
        want = min(max(n, WINDOW_BYTES), self.size - i)
        self.win, self.at = _pread_exact(self.fd, want, i, self.size), i

    def byte(self, i: int) -> int:
        j = i - self.at
        if not 0 <= j < len(self.win):
            self._load(i, 1)
            j = 0
        return self.win[j]

    def read(self, i: int, n: int) -> bytes:
        j = i - self.at
        if j >= 0 and j + n <= len(self.win):
            return bytes(self.win[j : j + n])
        return _pread_exact(self.fd, n, i, self.size)


def _pread_exact(fd: int, n: int, offset: int, size: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < n:
        part = os.pread(fd, n - got, offset + got)
        if not part:
            now = os.fstat(fd).st_size
            raise FileChangedError(
                f"it had {size} bytes when opened, {now} at byte {offset + got} of the read"
            )
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _varint(src: _Source, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= end or shift > 63:
            raise _Bad
        b = src.byte(i)
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _all_fields(src: _Source, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, payload start, field end) of every field."""
    i = start
    while i < end:
        at = i
        tag, i = _varint(src, i, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, i = _varint(src, i, end)
            payload = at
        elif wire in (1, 5):
            payload = i
            i += 8 if wire == 1 else 4
        elif wire == 2:
            n, i = _varint(src, i, end)
            payload = i
            i += n
        else:
            raise _Bad
        if i > end:
            raise _Bad
        yield field, wire, at, payload, i


def _fields(
    src: _Source, start: int, end: int, wanted: frozenset[int]
) -> list[tuple[int, int, int]]:
    """(field number, start, end) of the length-delimited fields numbered in ``wanted``."""
    return [
        (field, s, e)
        for field, wire, _, s, e in _all_fields(src, start, end)
        if wire == 2 and field in wanted
    ]


class _Counter:
    def __init__(self, src: _Source, cap: int, max_depth: int) -> None:
        self.src, self.cap, self.max_depth, self.nodes = src, cap, max_depth, 0

    def graph(self, start: int, end: int, node_field: int, depth: int) -> None:
        if depth > self.max_depth:
            return  # the parse-time walk reports the depth
        for _, s, e in _fields(self.src, start, end, frozenset({node_field})):
            self.nodes += 1
            if self.nodes > self.cap:
                raise _Over
            for _, a_s, a_e in _fields(self.src, s, e, frozenset({_NODE_ATTRIBUTE})):
                subs = _fields(self.src, a_s, a_e, frozenset({_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS}))
                for _, g_s, g_e in subs:
                    self.graph(g_s, g_e, _GRAPH_NODE, depth + 1)

    def model(self) -> int | None:
        try:
            top = _fields(self.src, 0, self.src.size, frozenset({_MODEL_GRAPH, _MODEL_FUNCTIONS}))
            for field, s, e in top:
                node_field = _GRAPH_NODE if field == _MODEL_GRAPH else _FUNCTION_NODE
                self.graph(s, e, node_field, 0)
        except _Over:
            return self.nodes
        except _Bad:
            return None
        return self.nodes


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _length_field(field: int, payload: list[bytes]) -> list[bytes]:
    n = sum(len(p) for p in payload)
    return [_encode_varint(field << 3 | 2), _encode_varint(n), *payload]


@dataclass(frozen=True)
class ModelBytes:
    """What :func:`read_model_bytes` read: the bytes to parse (None when the node cap was
    passed), the nodes counted (None: malformed; up to cap + 1)
    and the names of the initializers whose values were left out."""

    data: bytes | bytearray | None
    nodes: int | None
    stripped: tuple[str, ...] = ()


def _tensor_name(src: _Source, start: int, end: int) -> str:
    for field, wire, _, s, e in _all_fields(src, start, end):
        if field == 8 and wire == 2:
            return src.read(s, e - s).decode("utf-8", "replace")
    return ""


def _stripped_graph(src: _Source, start: int, end: int, over: int, names: list[str]) -> list[bytes]:
    """The graph's fields, each initializer of more than ``over`` bytes without its values."""
    out: list[bytes] = []
    for field, wire, at, s, e in _all_fields(src, start, end):
        if field == _GRAPH_INITIALIZER and wire == 2 and e - s > over:
            kept = [
                src.read(t_at, t_e - t_at)
                for t_field, _, t_at, _, t_e in _all_fields(src, s, e)
                if t_field not in _TENSOR_DATA
            ]
            names.append(_tensor_name(src, s, e))
            out.extend(_length_field(field, kept))
        else:
            out.append(src.read(at, e - at))
    return out


def _stripped_model(src: _Source, over: int) -> tuple[bytes, tuple[str, ...]]:
    out: list[bytes] = []
    names: list[str] = []
    for field, wire, at, s, e in _all_fields(src, 0, src.size):
        if field == _MODEL_GRAPH and wire == 2:
            out.extend(_length_field(field, _stripped_graph(src, s, e, over, names)))
        else:
            out.append(src.read(at, e - at))
    return b"".join(out), tuple(names)


def read_model_bytes(
    path: Path, cap: int, max_depth: int = 16, strip_over: int | None = None
) -> ModelBytes:
    """The model in ``path`` read once by positioned reads: its nodes counted up to ``cap + 1``
    (more is not counted), then its bytes, whole, or (``strip_over``) with every main-graph
    initializer longer than ``strip_over`` bytes kept without its values (dims, data type,
    name and external-data entries stay): a reader of eps constants and dims then never holds
    a large weight. :class:`FileChangedError` when the file's size changes during the read."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        whole = None if strip_over is not None else _pread_exact(fd, size, 0, size)
        src = _Source(fd, size, whole)
        nodes = _Counter(src, cap, max_depth).model()
        if nodes is None:  # malformed: the parser says how
            result = ModelBytes(whole if whole is not None else src.read(0, size), None)
        elif nodes > cap:
            result = ModelBytes(None, nodes)
        elif whole is not None:
            result = ModelBytes(whole, nodes)
        else:
            try:
                data, names = _stripped_model(src, strip_over or 0)
            except _Bad:
                data, names = src.read(0, size), ()
            result = ModelBytes(data, nodes, names)
        now = os.fstat(fd).st_size
        if now != size:
            raise FileChangedError(f"it had {size} bytes when opened, {now} after the read")
    return result


def count_nodes(path: Path, cap: int, max_depth: int = 16) -> int | None:
    """The nodes of the model in ``path`` (main graph, functions, subgraphs), counted up to
    ``cap + 1`` (more is not counted); None when the bytes are not a well-formed message (the
    parser then says so). The file is read in windows, never mapped."""
    with open(path, "rb") as f:
        fd = f.fileno()
        return _Counter(_Source(fd, os.fstat(fd).st_size), cap, max_depth).model()
