"""Writing a capture: the q dump (.npz with positions) and the YAML config. (A summary-only
capture is written by :func:`rmsnorm_eps.merge.write_summary` of
:func:`rmsnorm_eps.capture.report.summary_report`: the format ``rmsnorm-eps merge`` reads.)

Dump format (read by ``ratio``): one member per module that ran, named by the module name,
holding its q values as float32, shape (N,); beside it the int64 companions
``<name>::position`` (rank of the token among its sequence's real tokens, 0 = first token),
``<name>::batch`` (sequence index) and, for per-head norms, ``<name>::head`` (head, or group of a
gated norm), each of shape (N,); ``<name>::call`` (0..k-1) for a module called k > 1 times per
forward pass; ``<name>::norm`` (int8, :data:`NORM_CODES`: 1 layer, 2 gated-rms, 3 l2) for a
module that is not an RMSNorm (absent: rms, code 0). The values are what the module divides by:
q = mean(x**2) (RMSNorm, per group for a gated norm), v = mean((x - mean x)**2) (LayerNorm),
sum(x**2) (L2). Modules whose kind is unknown are not in the dump.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps.atomic import atomic_write_bytes, atomic_write_text
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
from rmsnorm_eps.dumps import npy_bytes

#: What ``--save-data`` replaces by the rank's number under torchrun (``q-rank{rank}.npz``).
RANK_FIELD = "{rank}"


def rank_path(path: os.PathLike[str] | str, rank: int) -> Path:
    """``path`` with every ``{rank}`` replaced by ``rank``: the file that rank writes."""
    return Path(str(path).replace(RANK_FIELD, str(rank)))


def rank_outputs(
    label: str, path: os.PathLike[str] | str | None, world: int
) -> list[tuple[str, Path | None]]:
    """``(label, path)`` of every file the ranks of a ``world``-process job write for an output
    holding ``{rank}`` (one per rank: each is checked against the inputs and the other outputs
    before anything runs), else ``path`` itself."""
    if path is None or RANK_FIELD not in str(path):
        return [(label, None if path is None else Path(path))]
    return [(label, rank_path(path, r)) for r in range(max(1, world))]


__all__ = [
    "NORM_CODES",
    "RANK_FIELD",
    "config_document",
    "dump_bytes",
    "module_facts",
    "rank_outputs",
    "rank_path",
    "write_config",
    "write_dump",
]


#: The ``<name>::norm`` companion's codes.
NORM_CODES = {"rms": 0, "layer": 1, "gated-rms": 2, "l2": 3}


def _ran(result: CaptureResult) -> list[ModuleRecord]:
    ran = [m for m in result.modules if m.count > 0]
    if not ran:
        raise CaptureError("no norm module saw a token: nothing was captured")
    return ran


def dump_bytes(result: CaptureResult) -> bytes:
    """The .npz bytes of a full capture (see the module docstring for the members)."""
    if result.summary_only:
        raise CaptureError("a summary-only capture has no q values to dump")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for m in _ran(result):
            assert m.q is not None and m.position is not None and m.batch is not None
            members = {
                m.name: m.q.astype(np.float32),
                f"{m.name}::position": m.position,
                f"{m.name}::batch": m.batch,
            }
            if m.heads > 1 and m.head is not None:
                members[f"{m.name}::head"] = m.head
            if m.max_calls > 1 and m.call is not None:
                members[f"{m.name}::call"] = m.call
            if m.norm not in (None, "rms"):
                code = NORM_CODES[str(m.norm)]
                members[f"{m.name}::norm"] = np.full(m.q.shape, code, dtype=np.int8)
            for key, arr in members.items():
                zf.writestr(key + ".npy", npy_bytes(np.ascontiguousarray(arr)))
    return buf.getvalue()


def write_dump(result: CaptureResult, path: str | os.PathLike[str]) -> None:
    """Write the dump atomically."""
    atomic_write_bytes(path, dump_bytes(result))


def module_facts(m: ModuleRecord) -> dict[str, Any]:
    """One module's capture facts as a plain dict (for the JSON report)."""
    return {
        "name": m.name,
        "class": m.class_name,
        "kind": m.kind,
        "norm": m.norm,
        "reason": m.reason,
        "bias": m.bias,
        "group_size": m.group_size,
        "gate_before": m.gate_before,
        "eps": m.eps,
        "eps_source": m.eps_source,
        "dim": m.dim,
        "input_dtype": m.input_dtype,
        "gain": m.gain,
        "weight": m.weight,
        "weight_dtype": m.weight_dtype,
        "layout": m.layout,
        "heads": m.heads,
        "calls": m.calls,
        "calls_per_forward": m.max_calls,
        "count": m.count,
    }


def config_document(result: CaptureResult, model_name: str, source: str) -> dict[str, Any]:
    """The YAML config (schema_version 1) of the live values: defaults from the most common
    module settings, one entry per module (exact name) with its eps and dim (elements per q: a
    gated norm's group size), plus ``norm`` (rms, layer, gated-rms, l2) and ``gain`` (w, 1+w,
    none) where they differ from the default. Modules of unknown kind are left out."""
    ran = _ran(result)
    eps_default = Counter(m.eps for m in ran).most_common(1)[0][0]
    dim_default = Counter(m.dim for m in ran).most_common(1)[0][0]
    gain_default = Counter(m.gain for m in ran).most_common(1)[0][0]
    norm_default = Counter(m.norm or "rms" for m in ran).most_common(1)[0][0]
    first = ran[0]
    layers: dict[str, Any] = {}
    for m in ran:
        entry: dict[str, Any] = {"eps": m.eps, "dim": m.dim}
        if (m.norm or "rms") != norm_default:
            entry["norm"] = m.norm
        if m.gain != gain_default:
            entry["gain"] = m.gain
        layers[m.name] = entry
    return {
        "schema_version": 1,
        "model": model_name,
        "source": source,
        "defaults": {
            "eps": eps_default,
            "placement": "inside",
            "gain": gain_default,
            "gain_baked": False,
            # HF RMSNorm classes and torch.nn.RMSNorm reduce in float32 for 16/32-bit inputs;
            # float64 inputs reduce in float64.
            "reduction_dtype": "float64" if first.input_dtype == "float64" else "float32",
            # Llama-style HF classes cast back to the input dtype, then multiply by w;
            # Gemma-style (1+w) classes and torch.nn.RMSNorm multiply in float32 and cast last.
            "weight_after_cast": not (first.gain == "1+w" or first.kind == "torch.nn.RMSNorm"),
            "dim": dim_default,
            "norm": norm_default,
        },
        "layers": layers,
    }


def write_config(
    result: CaptureResult, path: str | os.PathLike[str], model_name: str, source: str
) -> None:
    import yaml

    doc = config_document(result, model_name, source)
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False, width=100))
