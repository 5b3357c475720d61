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
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.config.model import ConfigEntry, NormConfig, NormSettings, Provenance, Resolved
from rmsnorm_eps.config.onnx_decomposed import decomposed_norms
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
    "scan_graph",
]

#: Largest .onnx file read (protobuf's own limit for one message is 2 GiB).
MAX_ONNX_BYTES = 2 << 30

#: Nodes walked in all (main graph, functions, subgraphs): a 70B decoder has ~20,000. Counted
#: on the wire format before the parse (:func:`~rmsnorm_eps.config.onnx_wire.count_nodes`) and
#: again while walking; a graph of 2^18 small nodes peaked at 235 MiB (measured).
MAX_NODES = 1 << 18

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
    from rmsnorm_eps.config.onnx_wire import count_nodes

    try:
        nodes = count_nodes(path, MAX_NODES, MAX_DEPTH)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if nodes is not None and nodes > MAX_NODES:
        raise InputFileError(path, f"over {MAX_NODES} nodes (graphs, functions, subgraphs)")
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, or anything the parser raises
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputFileError(path, f"not a readable ONNX model ({text})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputFileError(path, "not an ONNX model (no ir_version or no graph)")
    return model


#: Domains whose ops are read (ONNX's own, onnxruntime's contrib ops, ONNX-ML); the model's
#: own function domains are added per model. A node of any other domain is not read as an op
#: this reader knows, and the domain is a finding.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


@dataclass(frozen=True)
class GraphScan:
    """What :func:`scan_graph` found: the live norms (each name unique: a second norm of the
    same module is ``name#2``), the dead ones (no graph output depends on them), the names that
    more than one live norm had, and the unknown domains (domain -> (nodes, a node's name))."""

    norms: tuple[GraphNorm, ...]
    dead: tuple[GraphNorm, ...]
    shared_names: dict[str, tuple[str, ...]]
    unknown_domains: dict[str, tuple[int, str]]


@dataclass
class _Scan:
    path: Path
    known: frozenset[str]
    nodes: int = 0
    live: list[GraphNorm] = dc_field(default_factory=list)
    dead: list[GraphNorm] = dc_field(default_factory=list)
    unknown: dict[str, tuple[int, str]] = dc_field(default_factory=dict)

    def take(self, n: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise InputFileError(
                self.path, f"over {MAX_NODES} nodes (graphs, functions, subgraphs)"
            )

    def domain_of(self, node: Any) -> None:
        if node.domain not in self.known:
            n, first = self.unknown.get(node.domain, (0, f"{node.op_type} {node.name!r}"))
            self.unknown[node.domain] = (n + 1, first)


def _subgraphs(node: Any) -> Iterator[tuple[str, Any]]:
    for a in node.attribute:
        subs = [a.g] if a.HasField("g") else list(a.graphs)
        for i, sub in enumerate(subs):
            yield a.name + (f"[{i}]" if len(subs) > 1 else ""), sub


def _names_read_inside(node: Any, depth: int = 0) -> Iterator[str]:
    """Every name the subgraphs of ``node`` read (outer-scope values among them)."""
    if depth > MAX_DEPTH:
        return
    for _, sub in _subgraphs(node):
        for inner in sub.node:
            yield from (x for x in inner.input if x)
            yield from _names_read_inside(inner, depth + 1)


def _live_nodes(graph: Any, own: Any) -> set[int]:
    """The positions of the nodes of ``graph`` a graph output depends on: walked backwards
    from the outputs (``own``: the graph's node index), through the names read inside a
    node's subgraphs. A node of an outer graph is not in the set (its own walk decides)."""
    todo = [o if isinstance(o, str) else o.name for o in graph.output]
    live: set[int] = set()
    while todo:
        i = own.at.get(todo.pop())
        if i is None or i in live:
            continue
        live.add(i)
        node = graph.node[i]
        todo.extend(x for x in node.input if x)
        todo.extend(_names_read_inside(node))
    return live


def _walk_graph(
    graph: Any,
    label: str,
    outer: _Graph | None,
    opset: dict[str, int],
    scan: _Scan,
    depth: int,
    alive: bool = True,
) -> None:
    if depth > MAX_DEPTH:
        raise InputFileError(scan.path, f"subgraphs nested deeper than {MAX_DEPTH}")
    scan.take(len(graph.node))
    g = _index(graph, label, outer, scan.path.parent)
    live = _live_nodes(graph, g.own) if alive else set()
    for i, node in enumerate(graph.node):
        scan.domain_of(node)
        fused = _fused(g, node, opset)
        for norm in [fused] if fused is not None else decomposed_norms(g, node):
            (scan.live if g.own.at.get(norm.output) in live else scan.dead).append(norm)
        node_alive = i in live
        for name, sub in _subgraphs(node):
            sub_label = f"{label}/{node.op_type} {node.name!r}.{name}"
            _walk_graph(sub, sub_label, g, opset, scan, depth + 1, node_alive)


def scan_graph(model: Any, path: Path) -> GraphScan:
    """Every normalization of ``model``: main graph, its subgraphs, then each function; those
    no graph output depends on are kept apart (``dead``), each live one named uniquely."""
    opset = {
        ("" if o.domain in ("", "ai.onnx") else o.domain): int(o.version)
        for o in model.opset_import
    }
    known = KNOWN_DOMAINS | {fn.domain for fn in model.functions}
    scan = _Scan(path, frozenset(known))
    _walk_graph(model.graph, "graph", None, opset, scan, 0)
    for fn in model.functions:
        fopset = dict(opset)
        fopset.update({o.domain: int(o.version) for o in fn.opset_import})
        label = f"function {fn.domain}.{fn.name}"
        first = len(scan.live)
        _walk_graph(fn, label, None, fopset, scan, 1)
        scan.live[first:] = [
            replace(n, name=f"{label}/{n.name}") if n.name_from == "node name" else n
            for n in scan.live[first:]
        ]
    norms, shared = _unique(scan.live)
    return GraphScan(norms, tuple(scan.dead), shared, dict(scan.unknown))


def find_norms(model: Any, path: Path) -> tuple[GraphNorm, ...]:
    """The live normalizations of ``model`` (see :func:`scan_graph`), each name unique."""
    return scan_graph(model, path).norms


def _unique(norms: list[GraphNorm]) -> tuple[tuple[GraphNorm, ...], dict[str, tuple[str, ...]]]:
    """The norms with the second, third ... of one name renamed ``name#2``, ``name#3``, and
    each shared name with the names given to its norms."""
    seen: dict[str, list[str]] = {}
    out = []
    for norm in norms:
        names = seen.setdefault(norm.name, [])
        new = norm.name if not names else f"{norm.name}#{len(names) + 1}"
        names.append(new)
        out.append(norm if new == norm.name else replace(norm, name=new))
    return tuple(out), {k: tuple(v) for k, v in seen.items() if len(v) > 1}


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


def _shared_name_settings(
    settings: dict[str, dict[str, Resolved]], shared: dict[str, tuple[str, ...]], path: str
) -> None:
    """For a name several norms have: each setting they disagree on becomes a conflict in the
    entry of that name, so ``ratio --config`` refuses the layer rather than take one of them
    (the others keep their own ``name#2`` entries)."""
    for name, names in shared.items():
        first = settings[name]
        for key in list(first):
            values = [settings[n][key].value if key in settings[n] else None for n in names]
            same = all(v == values[0] for v in values)  # stored values, exactly
            if not same:
                shown = ", ".join(f"{n}: {v!r}" for n, v in zip(names, values, strict=True))
                note = f"{len(names)} norms are named {name} and disagree on {key} ({shown})"
                first[key] = Resolved(None, Provenance("conflict", path, note=note))


def _scan_notes(scan: GraphScan) -> list[str]:
    """The findings of a scan besides the eps ones: dead norms, shared names, unknown domains."""
    notes = []
    for norm in scan.dead:
        notes.append(
            f"FINDING {shorten(norm.name, 120)}: ignored, no graph output depends on it "
            f"(output {shorten(norm.output, 80)!r} of {norm.graph}: {norm.op})"
        )
    for name, names in scan.shared_names.items():
        notes.append(
            f"FINDING {len(names)} norms are named {shorten(name, 120)} (kept as "
            f"{', '.join(shorten(n, 120) for n in names)}): the graph does not tell them apart"
        )
    for domain, (n, first) in sorted(scan.unknown_domains.items()):
        notes.append(
            f"FINDING {n} node(s) of unknown domain {shorten(domain, 80)!r} (first: "
            f"{shorten(first, 120)}) not read: a norm computed by them is not found"
        )
    return notes


def _config(model: Any, path: Path) -> NormConfig:
    scan = scan_graph(model, path)
    norms = scan.norms
    spath = str(path)
    settings = {n.name: dict(_settings(n, spath)) for n in norms}
    _shared_name_settings(settings, scan.shared_names, spath)
    entries = tuple(
        ConfigEntry(escape_glob(n.name), tuple(settings[n.name].items())) for n in norms
    )
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in list(model.opset_import)[:8])
    notes = [
        f"{len(norms)} normalization(s) found; opsets {opsets}",
        *_sibling_notes(norms),
        *_scan_notes(scan),
    ]
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
