"""The eps an ONNX graph really runs with, measured by onnxruntime on the parity probes.

For each norm :func:`~rmsnorm_eps.config.onnx_graph.find_norms` finds in the main graph, the
nodes between its input x and its output are cut out into a small model (a backward slice
from the output that stops at x, initializers and Constant nodes; at most
:data:`MAX_SLICE_NODES` nodes), run by onnxruntime on the CPU with every graph optimization on
(``ORT_ENABLE_ALL``: fused kernels are what is measured), on probes made for the norm's stored
eps (``probe``'s rows: q from far below to far above eps), with the graph's own weight as the
probes' gain. The existing inference (:func:`~rmsnorm_eps.parity.infer.infer`) fits
y = g * x / sqrt(q + eps) (inside), g * x / (sqrt(q) + eps) (outside) and
g * x / max(sqrt(q), eps) (clamp) to the outputs and gives the effective eps and placement.

A norm's measurement agrees when the effective eps is within ``rel_tol`` (default 5%) of the
stored eps and of the configured one (``--config``), and the placement is the stored one.

Every onnxruntime session runs in a child process (:mod:`rmsnorm_eps.parity.onnx_child`):
bounded in time and address space, its logger silenced and its stderr never relayed raw; the
model travels as bytes, so onnxruntime opens no file. A norm whose cut-out subgraph holds a
node whose cost the graph alone decides (:data:`UNBOUNDED_OPS`: Loop, Scan, If,
ConstantOfShape...) or reads external data is not run. ``optimized_out`` is refused for a model
with external data, and its folder must exist.

The verdict is never vacuous: a norm that cannot be measured (inside an If/Loop branch, its
weight a graph input, refused by onnxruntime, its dimension unknown...) is kept as a
:class:`SkippedNorm` with the reason, and fails the report unless ``allow_skipped``; a report
with no norm measured never passes. A ``--config`` YAML pattern that matches none of the
graph's norms is a :class:`~rmsnorm_eps.errors.ConfigError` (as for ``ratio --config``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmsnorm_eps.errors import ConfigError, InputFileError, MissingExtraError
from rmsnorm_eps.parity.onnx_child import OrtChild, OrtChildError

__all__ = [
    "DEFAULT_REL_TOL",
    "MAX_SLICE_NODES",
    "NormMeasurement",
    "OnnxParityReport",
    "SkippedNorm",
    "measure_onnx",
]

#: Effective eps agrees with the stored one when |eff - stored| <= rel_tol * stored.
DEFAULT_REL_TOL = 0.05
MAX_SLICE_NODES = 256
#: Ops of the default domain whose run time or memory a hostile graph sets at will (a Loop of
#: 2^62 iterations, a ConstantOfShape of 1 GiB): a norm's subgraph holding one is not run.
UNBOUNDED_OPS = frozenset({"Loop", "Scan", "If", "ConstantOfShape", "SequenceMap"})
#: eps used to design the probes of a norm that stores none (and has no configured eps).
FALLBACK_PROBE_EPS = 1e-5
_DTYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}


@dataclass(frozen=True)
class NormMeasurement:
    """One norm: what the graph stores, what the config says, what onnxruntime does."""

    name: str
    op: str
    stored: float | None
    stored_where: str
    configured: float | None
    configured_from: str | None
    probe_eps: float
    effective: float | None
    effective_low: float | None
    effective_high: float | None
    placement_stored: str
    placement: str
    dtype: str
    rows_used: int
    note: str
    findings: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class SkippedNorm:
    """A norm found in the graph that was not measured, and why."""

    name: str
    why: str


@dataclass(frozen=True)
class OnnxParityReport:
    """``parity onnx``: every measured norm, and the norms that could not be measured."""

    command: ClassVar[str] = "parity onnx"  # names its reporter (rmsnorm_eps.reports)

    path: str
    config: str | None
    optimized_out: str | None
    rel_tol: float
    optimization: str
    norms: tuple[NormMeasurement, ...]
    skipped: tuple[SkippedNorm, ...]
    #: A skipped norm does not fail the report (``--allow-skipped``); 0 measured still fails.
    allow_skipped: bool = False

    @property
    def passed(self) -> bool:
        """Every norm measured agrees, at least one was measured, and none was skipped
        (unless ``allow_skipped``)."""
        if not self.norms or (self.skipped and not self.allow_skipped):
            return False
        return all(n.agrees for n in self.norms)

    @property
    def findings(self) -> int:
        return sum(1 for n in self.norms if not n.agrees)


def _external(t: Any) -> bool:
    import onnx

    return bool(t.data_location == onnx.TensorProto.EXTERNAL)


def _check_runnable(node: Any) -> None:
    """Refuse (ValueError) a node whose cost is unbounded or that reads external data."""
    if node.domain in ("", "ai.onnx") and node.op_type in UNBOUNDED_OPS:
        raise ValueError(
            f"the norm's subgraph holds a {node.op_type} node (not run: the graph sets its cost)"
        )
    for a in node.attribute:
        if a.HasField("t") and _external(a.t):
            raise ValueError("a Constant of the norm's subgraph is external data (not read)")
        if a.g.node or any(a.graphs):
            raise ValueError(f"the norm's subgraph holds a {node.op_type} node with a subgraph")


def _slice(model: Any, norm: Any) -> tuple[list[Any], list[Any]]:
    """(nodes in graph order, initializers) from the norm's inputs to its output."""
    graph = model.graph
    producer: dict[str, tuple[int, Any]] = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            producer[out] = (i, node)
    inits = {t.name: t for t in graph.initializer}
    stops = set(norm.inputs)
    taken: dict[int, Any] = {}
    used: dict[str, Any] = {}
    todo = [norm.output]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if not name or name in seen or name in stops:
            continue
        seen.add(name)
        if name in inits:
            if _external(inits[name]):
                raise ValueError(f"initializer {name!r} is external data (not read)")
            used[name] = inits[name]
            continue
        found = producer.get(name)
        if found is None:
            raise ValueError(f"depends on the graph input {name!r}, not only on the norm's input")
        i, node = found
        if i not in taken:
            _check_runnable(node)
            taken[i] = node
            if len(taken) > MAX_SLICE_NODES:
                raise ValueError(f"more than {MAX_SLICE_NODES} nodes between input and output")
            todo.extend(node.input)
    return [taken[i] for i in sorted(taken)], list(used.values())


def _array(model: Any, name: str | None) -> np.ndarray | None:
    if name is None:
        return None
    import onnx

    for t in model.graph.initializer:
        if t.name == name:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                raise ValueError(f"initializer {name!r} is external data (not read)")
            arr: np.ndarray = onnx.numpy_helper.to_array(t).astype(np.float64).ravel()
            return arr
    return None


@dataclass(frozen=True)
class _Types:
    """Element type and, where static, last dimension of the main graph's tensors."""

    elem: dict[str, int]
    last_dim: dict[str, int]


def _elem_types(model: Any) -> _Types:
    """The element type and static last dimension of every tensor of the main graph, by onnx
    shape inference (on a copy of the graph without initializer data, so that large weights
    are not copied), else the declared ones."""
    import onnx

    graph = model.graph
    types: dict[str, int] = {t.name: int(t.data_type) for t in graph.initializer}
    dims: dict[str, int] = {t.name: int(t.dims[-1]) for t in graph.initializer if t.dims}
    try:
        light = onnx.ModelProto()
        light.ir_version = model.ir_version
        light.opset_import.extend(model.opset_import)
        light.functions.extend(model.functions)
        g = light.graph
        for part in ("node", "input", "output", "value_info"):
            getattr(g, part).extend(getattr(graph, part))
        for t in graph.initializer:  # each a graph input of its type and shape, without data
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        inferred = onnx.shape_inference.infer_shapes(light).graph
        infos = (*inferred.input, *inferred.value_info, *inferred.output)
    except Exception:
        infos = (*graph.input, *graph.value_info, *graph.output)
    for vi in infos:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if tt.elem_type:
            types[vi.name] = int(tt.elem_type)
        shape = tt.shape.dim if tt.HasField("shape") else ()
        if shape and shape[-1].HasField("dim_value") and shape[-1].dim_value > 0:
            dims.setdefault(vi.name, int(shape[-1].dim_value))
    return _Types(types, dims)


def _dimension(norm: Any, weight: np.ndarray | None, types: _Types) -> int:
    """The norm's d: as found, else the weight's length, else the static last dimension of
    its input or output (an optimized float16 copy keeps it only there)."""
    if norm.dim is not None:
        return int(norm.dim)
    if weight is not None and weight.size > 1:
        return int(weight.size)
    for name in (*norm.inputs[:1], norm.output, norm.scale):
        if name and types.last_dim.get(name, 0) > 1:
            return types.last_dim[name]
    raise ValueError("the norm's dimension is unknown (no scale initializer, no static shape)")


def _mini_model(model: Any, norm: Any, dim: int, types: _Types) -> tuple[bytes, str]:
    """The serialized small model of one norm and its input dtype."""
    from onnx import helper

    nodes, inits = _slice(model, norm)
    elem = types.elem.get(norm.inputs[0], 1)
    inputs = [helper.make_tensor_value_info(n, elem, ["n", dim]) for n in norm.inputs]
    output = helper.make_empty_tensor_value_info(norm.output)
    graph = helper.make_graph(nodes, "norm", inputs, [output], inits)
    mini = helper.make_model(graph, opset_imports=list(model.opset_import))
    mini.ir_version = model.ir_version
    mini.functions.extend(model.functions)
    return mini.SerializeToString(), _DTYPES.get(elem, "float32")


def _configured(config: Any, name: str) -> tuple[float | None, str | None]:
    if config is None:
        return None, None
    settings = config.settings_for(name)
    if settings is None or not isinstance(settings.eps.value, float):
        return None, f"{config.path}: no eps for {name}"
    return settings.eps.value, settings.eps.provenance.describe()


def _check_config_patterns(config: Any, norms: Any) -> None:
    """A YAML ``layers:`` pattern of ``config`` that matches none of the graph's norms is an
    error: a typo'd override would otherwise leave every norm on the defaults."""
    if config is None:
        return
    from rmsnorm_eps.config.resolve import unused_patterns

    unused = unused_patterns(config, [n.name for n in norms])
    if unused:
        shown = ", ".join(repr(p) for p in unused[:20])
        raise ConfigError(
            f"{config.path}: {len(unused)} layer pattern(s) match no norm of the graph: {shown}; "
            "fix the pattern(s)"
        )


#: |x| of the gain calibration rows: q = 4096, far above any eps a norm stores.
_CALIBRATION_SCALE = 64.0


def _calibrated_gain(
    child: OrtChild, blob: bytes, norm: Any, dim: int, dtype: str
) -> tuple[np.ndarray, np.ndarray]:
    """The gain g and bias b the norm's subgraph applies, from two rows x = c s and -c s
    (s alternating +1/-1, c = 64, so q >> eps): with u = (s - mean(s)) / std(s) for a
    LayerNorm and u = s / rms(s) = s for an RMSNorm, y(+) = g u + b and y(-) = -g u + b, so
    g = (y(+) - y(-)) / (2 u) and b = (y(+) + y(-)) / 2."""
    from rmsnorm_eps.dtypes import numpy_dtype

    s = np.where(np.arange(dim) % 2 == 0, 1.0, -1.0)
    u = (s - s.mean()) / s.std() if norm.norm == "layer" else s / np.sqrt(np.mean(s * s))
    x = (np.stack([s, -s]) * _CALIBRATION_SCALE).astype(numpy_dtype(dtype))
    feed = {name: x if i == 0 else np.zeros_like(x) for i, name in enumerate(norm.inputs)}
    y = np.asarray(child.run(blob, feed, norm.output), dtype=np.float64)
    if y.shape != (2, dim) or not np.all(np.isfinite(y)):
        raise ValueError("the norm's gain could not be read from its outputs")
    return (y[0] - y[1]) / (2.0 * u), (y[0] + y[1]) / 2.0


def _measure(
    child: OrtChild, model: Any, norm: Any, config: Any, rel_tol: float, types: _Types
) -> NormMeasurement:
    from rmsnorm_eps.dtypes import numpy_dtype
    from rmsnorm_eps.parity.api import compare_outputs
    from rmsnorm_eps.parity.probes import make_probes

    weight = _array(model, norm.scale)
    dim = _dimension(norm, weight, types)
    if weight is not None and weight.size not in (1, dim):
        raise ValueError(f"the weight has {weight.size} elements for a dimension of {dim}")
    configured, configured_from = _configured(config, norm.name)
    probe_eps = norm.eps if norm.eps else (configured or FALLBACK_PROBE_EPS)
    blob, dtype = _mini_model(model, norm, dim, types)
    gain, bias, convention = _gain_and_bias(child, model, norm, weight, (blob, dim, dtype))
    probes = make_probes(
        dim,
        probe_eps,
        gain=gain,
        dtype=dtype,
        gain_convention=convention,
        norm="layer" if norm.norm == "layer" else "rms",
        bias=bias if bias is not None else "zeros",
    )
    x = probes.inputs.astype(numpy_dtype(dtype))
    feed = {name: x if i == 0 else np.zeros_like(x) for i, name in enumerate(norm.inputs)}
    out = child.run(blob, feed, norm.output)
    result = compare_outputs(probes, np.asarray(out), output_dtype=dtype)
    inf = result.inference
    findings = _findings(norm, inf, configured, rel_tol)
    return NormMeasurement(
        name=norm.name,
        op=norm.op,
        stored=norm.eps,
        stored_where=norm.eps_where,
        configured=configured,
        configured_from=configured_from,
        probe_eps=probe_eps,
        effective=inf.eps,
        effective_low=inf.eps_low,
        effective_high=inf.eps_high,
        placement_stored=norm.placement,
        placement=inf.placement,
        dtype=dtype,
        rows_used=inf.rows_used,
        note=inf.note,
        findings=findings,
    )


def _gain_and_bias(
    child: OrtChild, model: Any, norm: Any, weight: np.ndarray | None, mini: tuple[bytes, int, str]
) -> tuple[str | np.ndarray, np.ndarray | None, str]:
    """The probes' gain, bias and gain convention: the graph's initializers, else (a weight
    or bias computed in the graph, e.g. a Cast in an optimized float16 copy) what the
    subgraph applies (:func:`_calibrated_gain`)."""
    blob, dim, dtype = mini
    if weight is not None and weight.size == 1 < dim:
        weight = np.full(dim, weight[0], dtype=np.float64)
    bias = _array(model, norm.bias)
    if (weight is None and norm.gain != "none") or (norm.bias is not None and bias is None):
        gain, bias = _calibrated_gain(child, blob, norm, dim, dtype)
        return gain, bias, "w"
    return (weight if weight is not None else "ones"), bias, "1+w" if norm.gain == "1+w" else "w"


def _findings(norm: Any, inf: Any, configured: float | None, rel_tol: float) -> tuple[str, ...]:
    """Why the measured norm does not agree (empty when it does)."""
    findings: list[str] = []
    if norm.eps is None:
        findings.append(f"the graph stores no eps ({norm.eps_where})")
    if norm.eps_default:
        findings.append(f"eps is the op's schema default ({norm.eps_where})")
    for label, want in (("stored", norm.eps), ("configured", configured)):
        if want is None:
            continue
        if inf.eps is None:
            findings.append(f"effective eps not measured ({inf.note}); {label} {want:.6g}")
        elif abs(inf.eps - want) > rel_tol * want:
            findings.append(
                f"effective eps {inf.eps:.6g} differs from the {label} {want:.6g} "
                f"by {abs(inf.eps - want) / want:.1%} (> {100 * rel_tol:g}%)"
            )
    if inf.placement not in ("undetermined", norm.placement) and norm.norm != "layer":
        findings.append(f"placement measured {inf.placement}, the graph's is {norm.placement}")
    return tuple(dict.fromkeys(findings))


def _check_optimized_out(path: Path, model: Any, optimized_out: Path) -> None:
    """Refuse, before anything runs, an ``optimized_out`` that onnxruntime could not write
    without opening external data, or that would land on the model or a missing folder."""
    folder = optimized_out.parent if str(optimized_out.parent) else Path(".")
    if not folder.is_dir():
        raise InputFileError(optimized_out, f"its folder {folder} does not exist")
    with_data = [t.name for t in _all_tensors(model) if _external(t)]
    if with_data:
        raise InputFileError(
            path,
            f"{len(with_data)} tensor(s) are in external data files (e.g. {with_data[0]!r}), "
            "which are never opened: --optimized-out cannot make onnxruntime's copy",
        )
    if optimized_out.exists() and path.exists() and os.path.samefile(optimized_out, path):
        raise InputFileError(optimized_out, "is the model itself: refusing to overwrite it")


def _all_tensors(model: Any) -> Any:
    """Every initializer and Constant tensor of the main graph."""
    yield from model.graph.initializer
    for node in model.graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t


def _save_optimized(child: OrtChild, path: Path, model: Any, optimized_out: Path) -> None:
    """onnxruntime's optimized copy of the whole model, written by the bounded child to a
    temporary file beside ``optimized_out`` and renamed over it."""
    import tempfile

    folder = optimized_out.parent if str(optimized_out.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{optimized_out.name}.", suffix=".onnx", dir=folder)
    os.close(fd)
    try:
        child.optimize(model.SerializeToString(), Path(tmp))
        os.replace(tmp, optimized_out)
    except OrtChildError as exc:
        raise InputFileError(path, f"onnxruntime cannot load the model ({exc})") from None
    except OSError as exc:
        raise InputFileError(optimized_out, f"cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def measure_onnx(
    path: Path,
    *,
    config: Any = None,
    rel_tol: float = DEFAULT_REL_TOL,
    optimized_out: Path | None = None,
    allow_skipped: bool = False,
) -> OnnxParityReport:
    """Measure every norm of the main graph of ``path`` with onnxruntime (see the module
    docstring). ``config`` (a NormConfig) gives the configured eps per norm name.
    ``optimized_out``: onnxruntime's optimized copy of the whole model is saved there
    (``SessionOptions.optimized_model_filepath``), to be audited by ``config show``."""
    import importlib.util

    from rmsnorm_eps.config.onnx_graph import find_norms, load_onnx_model

    if importlib.util.find_spec("onnxruntime") is None:  # found here, imported in the child only
        raise MissingExtraError("onnxruntime", "onnx", "parity onnx")
    model = load_onnx_model(path)
    norms = find_norms(model, path)
    _check_config_patterns(config, norms)
    if optimized_out is not None:
        _check_optimized_out(path, model, optimized_out)
    types = _elem_types(model)
    measured: list[NormMeasurement] = []
    skipped: list[SkippedNorm] = []
    with OrtChild() as child:
        if optimized_out is not None:
            _save_optimized(child, path, model, optimized_out)
        for norm in norms:
            why = _not_measurable(norm)
            if why is not None:
                skipped.append(SkippedNorm(norm.name, why))
                continue
            try:
                measured.append(_measure(child, model, norm, config, rel_tol, types))
            except ValueError as exc:
                skipped.append(SkippedNorm(norm.name, str(exc)))
            except OrtChildError as exc:  # onnxruntime refuses the slice, or a limit
                skipped.append(SkippedNorm(norm.name, f"onnxruntime: {exc}"))
    return OnnxParityReport(
        path=str(path),
        config=None if config is None else config.path,
        optimized_out=None if optimized_out is None else str(optimized_out),
        rel_tol=rel_tol,
        optimization="onnxruntime CPU, ORT_ENABLE_ALL",
        norms=tuple(measured),
        skipped=tuple(skipped),
        allow_skipped=allow_skipped,
    )


def _not_measurable(norm: Any) -> str | None:
    if norm.graph != "graph":
        return f"in {norm.graph}: only main-graph norms are measured"
    if not norm.inputs or not norm.output or norm.op.endswith("EmbedLayerNormalization"):
        return "no float input to probe"
    return None
