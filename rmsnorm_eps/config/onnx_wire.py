"""Counting the nodes of a serialized ONNX model from its protobuf wire format, before the full
parse: a model over the node cap is refused without building its message tree (which costs
far more memory than the file: a few hundred bytes per node).

The wire format (protobuf encoding): each field is a varint tag ``field_number << 3 |
wire_type``, then a varint (type 0), 8 bytes (type 1), a varint length and that many bytes
(type 2) or 4 bytes (type 5). Only length-delimited fields on the way to a node are entered:
ModelProto.graph (7) and .functions (25), GraphProto.node (1), FunctionProto.node (7),
NodeProto.attribute (5), AttributeProto.g (6) and .graphs (11). Everything else is skipped by
its length, so the count touches the node bytes only. Malformed bytes end the count (the
parser then reports the file).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

__all__ = ["count_nodes"]

_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE, _FUNCTION_NODE = 1, 7
_NODE_ATTRIBUTE = 5
_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS = 6, 11


class _Over(Exception):
    pass


class _Bad(Exception):
    pass


def _varint(buf: mmap.mmap, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= end or shift > 63:
            raise _Bad
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(
    buf: mmap.mmap, start: int, end: int, wanted: frozenset[int]
) -> list[tuple[int, int, int]]:
    """(field number, start, end) of the length-delimited fields numbered in ``wanted``."""
    out = []
    i = start
    while i < end:
        tag, i = _varint(buf, i, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, i = _varint(buf, i, end)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i, end)
            if i + n > end:
                raise _Bad
            if field in wanted:
                out.append((field, i, i + n))
            i += n
        else:
            raise _Bad
    if i != end:
        raise _Bad
    return out


class _Counter:
    def __init__(self, buf: mmap.mmap, cap: int, max_depth: int) -> None:
        self.buf, self.cap, self.max_depth, self.nodes = buf, cap, max_depth, 0

    def graph(self, start: int, end: int, node_field: int, depth: int) -> None:
        if depth > self.max_depth:
            return  # the parse-time walk reports the depth
        for _, s, e in _fields(self.buf, start, end, frozenset({node_field})):
            self.nodes += 1
            if self.nodes > self.cap:
                raise _Over
            for _, a_s, a_e in _fields(self.buf, s, e, frozenset({_NODE_ATTRIBUTE})):
                subs = _fields(self.buf, a_s, a_e, frozenset({_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS}))
                for _, g_s, g_e in subs:
                    self.graph(g_s, g_e, _GRAPH_NODE, depth + 1)


def count_nodes(path: Path, cap: int, max_depth: int = 16) -> int | None:
    """The nodes of the model in ``path`` (main graph, functions, subgraphs), counted up to
    ``cap + 1`` (more is not counted); None when the bytes are not a well-formed message (the
    parser then says so). The file is mapped, not read into memory."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            counter = _Counter(buf, cap, max_depth)
            try:
                top = _fields(buf, 0, len(buf), frozenset({_MODEL_GRAPH, _MODEL_FUNCTIONS}))
                for field, s, e in top:
                    node_field = _GRAPH_NODE if field == _MODEL_GRAPH else _FUNCTION_NODE
                    counter.graph(s, e, node_field, 0)
            except _Over:
                return counter.nodes
            except _Bad:
                return None
            return counter.nodes
