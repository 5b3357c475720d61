"""The probe file format: a deterministic .npz of .npy members (written without pickling,
read back without unpickling, every member checked against the metadata before it is
decompressed)."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.parity.probe_set import (
    CATEGORIES,
    GAIN_CONVENTIONS,
    MAX_PROBE_VALUES,
    NORMS,
    PROBE_FORMAT,
    ProbeSet,
)

__all__ = ["load_probes", "probe_bytes", "write_probes"]

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
#: Largest metadata, category and category-name members (a few hundred bytes when written).
_MAX_SMALL_MEMBER = 1 << 20
#: A .npy header is at most 64 KiB (format 1.0) plus its 10-byte prefix.
_NPY_HEADER_MAX = 65536 + 12


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def probe_bytes(probes: ProbeSet) -> bytes:
    """The probe file as bytes: an .npz (zip of .npy members) with fixed member dates, so the
    same probe set always gives the same bytes."""
    members = {
        "inputs": probes.inputs,
        "reference": probes.reference,
        "weight": probes.weight,
        "gain": probes.gain,
        "category": probes.category,
        "category_names": np.array(CATEGORIES),
        "q": probes.q,
        "metadata": np.array(json.dumps(probes.metadata(), sort_keys=True)),
    }
    if probes.bias is not None:  # LayerNorm: the beta the implementation adds
        members["bias"] = probes.bias
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, array in members.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, _npy(array))
    return buf.getvalue()


def write_probes(probes: ProbeSet, path: str | os.PathLike[str]) -> None:
    """Write the probe file atomically."""
    from rmsnorm_eps.atomic import atomic_write_bytes

    atomic_write_bytes(path, probe_bytes(probes))


def _member(data: Any, path: Path, key: str) -> np.ndarray:
    try:
        value = data[key]
    except KeyError:
        raise InputFileError(path, "missing array (not a probe file?)", key=key) from None
    except ValueError as exc:  # object arrays refuse to load without pickle
        raise InputFileError(path, f"cannot read without pickle: {exc}", key=key) from None
    except Exception as exc:  # zlib/zip/header errors: any of them means a corrupt member
        raise InputFileError(path, f"cannot read: {type(exc).__name__}: {exc}", key=key) from None
    return np.asarray(value)


def _float_array(data: Any, path: Path, key: str, shape: tuple[int, ...]) -> np.ndarray:
    arr = _member(data, path, key)
    if arr.dtype != np.float64:
        raise InputFileError(path, f"expected float64, got {arr.dtype}", key=key)
    if arr.shape != shape:
        raise InputFileError(path, f"expected shape {shape}, got {arr.shape}", key=key)
    if not bool(np.all(np.isfinite(arr))):
        raise InputFileError(path, "holds NaN or inf", key=key)
    return arr


def _meta(meta: dict[str, Any], path: Path, name: str, kind: type | tuple[type, ...]) -> Any:
    value = meta.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputFileError(path, f"metadata field {name!r} missing or invalid", key="metadata")
    return value


def _open_probe_npz(p: Path) -> Any:
    """The probe file as an open :class:`numpy.lib.npyio.NpzFile` (never unpickles)."""
    from rmsnorm_eps.sources.sniff import Kind, sniff

    kind = sniff(p)
    if kind is Kind.NPY:
        raise InputFileError(p, "not a probe .npz file (a single .npy array)")
    if kind not in (Kind.ZIP, Kind.TORCH_ZIP):
        raise InputFileError(p, "not a probe .npz file (not a zip archive)")
    try:
        data = np.load(p, allow_pickle=False)
    except Exception as exc:
        raise InputFileError(p, f"not a probe .npz file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputFileError(p, "not a probe .npz file (a single .npy array)")
    return data


def _check_small_members(p: Path, sizes: dict[str, int]) -> None:
    for key in ("metadata", "category", "category_names"):
        if sizes.get(f"{key}.npy", 0) > _MAX_SMALL_MEMBER:
            raise InputFileError(
                p,
                f"member declares {sizes[f'{key}.npy']} bytes (a probe file's is small)",
                key=key,
            )


def _read_metadata(data: Any, p: Path) -> dict[str, Any]:
    raw_meta = _member(data, p, "metadata")
    if raw_meta.dtype.kind != "U" or raw_meta.shape != ():
        raise InputFileError(p, "expected a JSON string", key="metadata")
    try:
        meta = json.loads(str(raw_meta))
    except json.JSONDecodeError as exc:
        raise InputFileError(p, f"invalid JSON: {exc}", key="metadata") from None
    except RecursionError:
        raise InputFileError(p, "invalid JSON: nested too deeply", key="metadata") from None
    if not isinstance(meta, dict) or meta.get("format") != PROBE_FORMAT:
        raise InputFileError(p, f"not a {PROBE_FORMAT} file", key="metadata")
    return meta


def _meta_fields(meta: dict[str, Any], p: Path) -> tuple[float, int, str, str]:
    """``(eps, dim, dtype, gain convention)`` from the metadata."""
    eps = _meta(meta, p, "eps", float)
    dim = _meta(meta, p, "dim", int)
    dtype = _meta(meta, p, "dtype", str)
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise InputFileError(p, f"unknown dtype {dtype!r}", key="metadata")
    convention = _meta(meta, p, "gain_convention", str)
    if convention not in GAIN_CONVENTIONS:
        raise InputFileError(p, f"unknown gain convention {convention!r}", key="metadata")
    return eps, dim, dtype, convention


def _read_category(data: Any, p: Path) -> np.ndarray:
    names = _member(data, p, "category_names")
    if tuple(str(n) for n in names.tolist()) != CATEGORIES:
        raise InputFileError(p, "unexpected category names", key="category_names")
    category = _member(data, p, "category")
    if category.dtype.kind not in "iu" or category.ndim != 1:
        raise InputFileError(p, "expected a 1-D integer array", key="category")
    if category.size and (category.min() < 0 or category.max() >= len(CATEGORIES)):
        raise InputFileError(p, "category index out of range", key="category")
    return category


def _check_declared_sizes(p: Path, sizes: dict[str, int], n: int, dim: int) -> None:
    """Refuse members larger than the shapes the metadata implies, before decompressing."""
    if n * dim > MAX_PROBE_VALUES or dim < 1:
        raise InputFileError(
            p,
            f"{n} rows of dimension {dim}: over the {MAX_PROBE_VALUES} values read",
            key="metadata",
        )
    for key, count in (
        ("inputs", n * dim),
        ("reference", n * dim),
        ("weight", dim),
        ("gain", dim),
        ("bias", dim),
        ("q", n),
    ):
        declared = sizes.get(f"{key}.npy", 0)
        if declared > 8 * count + _NPY_HEADER_MAX:
            raise InputFileError(
                p,
                f"member declares {declared} bytes, over the {8 * count} bytes of data the "
                f"metadata implies",
                key=key,
            )


def load_probes(path: str | os.PathLike[str]) -> ProbeSet:
    """Read a probe file written by :func:`write_probes` (never unpickles; checks every array)."""
    p = Path(path)
    data = _open_probe_npz(p)
    with data:
        zf = data.zip
        assert zf is not None  # an NpzFile holds its open archive
        sizes = {i.filename: i.file_size for i in zf.infolist()}
        _check_small_members(p, sizes)
        meta = _read_metadata(data, p)
        eps, dim, dtype, convention = _meta_fields(meta, p)
        category = _read_category(data, p)
        n = int(category.shape[0])
        _check_declared_sizes(p, sizes, n, dim)
        inputs = _float_array(data, p, "inputs", (n, dim))
        reference = _float_array(data, p, "reference", (n, dim))
        weight = _float_array(data, p, "weight", (dim,))
        gain = _float_array(data, p, "gain", (dim,))
        q = _member(data, p, "q")
        if q.dtype != np.float64 or q.shape != (n,) or not bool(np.all(q >= 0.0)):
            raise InputFileError(p, f"expected {n} float64 values >= 0", key="q")
        norm = _norm(meta, p)
        bias = _float_array(data, p, "bias", (dim,)) if norm == "layer" else None
    try:
        numerics.validate_eps(eps)
        delta = numerics.validate_delta(_meta(meta, p, "delta", float))
    except InvalidParameterError as exc:
        raise InputFileError(p, str(exc), key="metadata") from None
    return ProbeSet(
        inputs=inputs,
        reference=reference,
        weight=weight,
        gain=gain,
        category=category.astype(np.int16),
        q=q,
        eps=eps,
        dtype=dtype,
        seed=_meta(meta, p, "seed", int),
        gain_kind=_meta(meta, p, "gain", str),
        gain_convention=convention,
        delta=delta,
        bound_ratio=_meta(meta, p, "bound_ratio", float),
        version=_meta(meta, p, "version", str),
        norm=norm,
        bias=bias,
        bias_kind=_meta(meta, p, "bias", str) if norm == "layer" else None,
    )


def _norm(meta: dict[str, Any], p: Path) -> str:
    """The norm the probes were made for: ``rms`` when the metadata has no ``norm`` field."""
    norm = meta.get("norm", "rms")
    if norm not in NORMS:
        raise InputFileError(p, f"unknown norm {str(norm)[:40]!r}", key="metadata")
    return str(norm)
