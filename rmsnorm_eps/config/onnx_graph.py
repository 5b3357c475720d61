"""Reader for exported ONNX graphs: every normalization in the graph and the eps it stores.

The model is read with ``onnx.load(..., load_external_data=False)`` (weights kept in external
files are never opened), after a size check (:data:`MAX_ONNX_BYTES`), and the graph is walked
with a node cap (:data:`MAX_NODES`, main graph, ``model.functions`` and every If/Loop/Scan
subgraph together). A file protobuf cannot parse is one :class:`InputFileError`.

A norm is found either as a fused op (its ``epsilon`` attribute, or the op schema's default
when the attribute is absent, said so: :mod:`~rmsnorm_eps.config.onnx_fused`) or as a
decomposed pattern matched by structure (:mod:`~rmsnorm_eps.config.onnx_decomposed`), where an
eps dropped altogether (torch's exporter does so for eps <= 1e-8) is a finding.

Cast nodes between the steps are walked through (the eps "behind a Cast" is reported with the
dtype it is cast to). The eps is kept as stored: its exact value, its dtype (the dtype the
addition runs in), and where it lives (attribute, initializer, Constant node, behind a Cast).

Each norm is named by the module it came from: the node metadata ``pkg.torch.onnx.name_scopes``
of torch's dynamo exporter (``[..., 'model.layers.0.input_layernorm', 'add_1']``), else a
legacy node name (``/model/layers.0/input_layernorm/Add`` -> ``model.layers.0.input_layernorm``),
else the node's own name. The result is a :class:`~rmsnorm_eps.config.model.NormConfig` with
one literal entry per norm, so ``config show``, ``config diff``, ``ratio --config`` and
``compare --config`` take an ONNX file like any other config.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.model import ConfigEntry, NormConfig, NormSettings
from rmsnorm_eps.config.onnx_decomposed import _decomposed
from rmsnorm_eps.config.onnx_fused import _fused
from rmsnorm_eps.config.onnx_nodes import GraphNorm, _Graph, _index, _onnx
from rmsnorm_eps.config.onnx_settings import _settings, _sibling_notes
from rmsnorm_eps.errors import InputFileError

__all__ = [
    "MAX_NODES",
    "MAX_ONNX_BYTES",
    "escape_glob",
    "external_data_files",
    "find_norms",
    "load_onnx_model",
    "onnx_findings",
    "read_onnx_config",
    "read_onnx_config_and_files",
]

#: Largest .onnx file read (protobuf's own limit for one message is 2 GiB).
MAX_ONNX_BYTES = 2 << 30

#: Nodes walked in all (main graph, functions, subgraphs): a 70B decoder has ~20,000.
MAX_NODES = 1 << 20

#: Graphs nested deeper than this (If inside Loop inside ...) are refused.
MAX_DEPTH = 16

_GLOB_SPECIAL = "*?["


def escape_glob(name: str) -> str:
    """``name`` as a glob that matches only itself: ``*``, ``?`` and ``[`` as ``[*]`` etc."""
    return "".join(f"[{c}]" if c in _GLOB_SPECIAL else c for c in name)


def load_onnx_model(path: Path) -> Any:
    """The ModelProto of ``path``, external data not loaded; one InputFileError otherwise."""
    from rmsnorm_eps.sources.sniff import check_regular_file

    size = check_regular_file(path)
    if size == 0:
        raise InputFileError(path, "empty file")
    if size > MAX_ONNX_BYTES:
        raise InputFileError(path, f"{size} bytes: over the {MAX_ONNX_BYTES}-byte limit")
    onnx = _onnx()
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, or anything the parser raises
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputFileError(path, f"not a readable ONNX model ({text})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputFileError(path, "not an ONNX model (no ir_version or no graph)")
    return model


class _Budget:
    def __init__(self, path: Path) -> None:
        self.nodes = 0
        self.path = path

    def take(self, n: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise InputFileError(
                self.path, f"over {MAX_NODES} nodes (graphs, functions, subgraphs)"
            )


def _walk_graph(
    graph: Any,
    label: str,
    outer: _Graph | None,
    opset: dict[str, int],
    budget: _Budget,
    depth: int,
) -> Iterator[GraphNorm]:
    if depth > MAX_DEPTH:
        raise InputFileError(budget.path, f"subgraphs nested deeper than {MAX_DEPTH}")
    budget.take(len(graph.node))
    g = _index(graph, label, outer)
    for node in graph.node:
        found = _fused(g, node, opset) or _decomposed(g, node)
        if found is not None:
            yield found
        for a in node.attribute:
            subs = [a.g] if a.HasField("g") else list(a.graphs)
            for i, sub in enumerate(subs):
                sub_label = f"{label}/{node.op_type} {node.name!r}.{a.name}" + (
                    f"[{i}]" if len(subs) > 1 else ""
                )
                yield from _walk_graph(sub, sub_label, g, opset, budget, depth + 1)


def find_norms(model: Any, path: Path) -> tuple[GraphNorm, ...]:
    """Every normalization of ``model``: main graph, its subgraphs, then each function."""
    opset = {
        ("" if o.domain in ("", "ai.onnx") else o.domain): int(o.version)
        for o in model.opset_import
    }
    budget = _Budget(path)
    norms = list(_walk_graph(model.graph, "graph", None, opset, budget, 0))
    for fn in model.functions:
        budget.take(len(fn.node))
        fopset = dict(opset)
        fopset.update({o.domain: int(o.version) for o in fn.opset_import})
        label = f"function {fn.domain}.{fn.name}"
        for norm in _walk_graph(fn, label, None, fopset, budget, 1):
            if norm.name_from == "node name":
                norm = replace(norm, name=f"{label}/{norm.name}")
            norms.append(norm)
    return tuple(_unique(norms))


def _unique(norms: list[GraphNorm]) -> Iterator[GraphNorm]:
    seen: dict[str, int] = {}
    for norm in norms:
        n = seen.get(norm.name, 0)
        seen[norm.name] = n + 1
        yield norm if n == 0 else replace(norm, name=f"{norm.name}#{n + 1}")


def _tensors(graph: Any, depth: int = 0) -> Iterator[Any]:
    """Every TensorProto of ``graph``: initializers, sparse initializers, Constant-node and
    other tensor attributes, in subgraphs too (the node cap was checked by :func:`find_norms`)."""
    if depth > MAX_DEPTH:
        return
    yield from getattr(graph, "initializer", ())
    for sparse in getattr(graph, "sparse_initializer", ()):
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield from (a.sparse_tensor.values, a.sparse_tensor.indices)
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                yield from _tensors(sub, depth + 1)


def external_data_files(model: Any, path: Path) -> tuple[Path, ...]:
    """The external data files ``model`` (read from ``path``) names, resolved against the
    model's folder, each once, in first-use order; none of them is opened. An output written
    by a command reading the model must never be one of them."""
    onnx = _onnx()
    found: dict[str, Path] = {}
    graphs = [model.graph, *model.functions]
    for t in (t for g in graphs for t in _tensors(g)):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        for entry in t.external_data:
            if entry.key == "location" and entry.value not in found:
                found[entry.value] = path.parent / entry.value
    return tuple(found.values())


def read_onnx_config_and_files(path: Path) -> tuple[NormConfig, tuple[Path, ...]]:
    """:func:`read_onnx_config` of ``path`` and its :func:`external_data_files` (one parse)."""
    model = load_onnx_model(path)
    return _config(model, path), external_data_files(model, path)


def read_onnx_config(path: Path) -> NormConfig:
    """The norms of an .onnx file as a NormConfig: one literal entry per norm (its module
    path, glob characters escaped); the defaults are all missing (an ONNX graph has no
    model-wide setting), and notes list the findings (eps absent, schema default used, one
    norm's eps unlike its siblings')."""
    return _config(load_onnx_model(path), path)


def _config(model: Any, path: Path) -> NormConfig:
    norms = find_norms(model, path)
    spath = str(path)
    entries = tuple(ConfigEntry(escape_glob(n.name), _settings(n, spath)) for n in norms)
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in list(model.opset_import)[:8])
    notes = [f"{len(norms)} normalization(s) found; opsets {opsets}", *_sibling_notes(norms)]
    if not norms:
        notes.append("FINDING no normalization found in the graph")
    return NormConfig(
        path=spath,
        kind="onnx",
        model=model.graph.name or None,
        defaults=NormSettings(),
        entries=entries,
        notes=tuple(notes),
        source=f"ONNX graph (producer {producer or '-'})",
    )


def onnx_findings(config: NormConfig) -> tuple[str, ...]:
    """The notes of an ONNX config that are findings (``FINDING ...``)."""
    return tuple(n for n in config.notes if n.startswith("FINDING "))
