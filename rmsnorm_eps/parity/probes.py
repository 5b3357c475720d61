"""Deterministic probe inputs for a parity check, with float64 reference outputs.

Ordinary random inputs never reach the region where eps matters, so a probe set covers it on
purpose. Rows are grouped in named categories, each defined by ``r = q/eps`` (``q = mean(x**2)``)
for the configured eps or by its shape:

* ``zero``: the zero vector (output must be exactly zero).
* ``tiny``: ``r`` = 1e-4, 1e-3, 1e-2, plus rows with ``sqrt(q)`` = 0.3, 1, 3 times eps (where an
  eps compared with the RMS, outside the square root or in a clamp, acts) when those are tiny.
* ``near-eps``: ``r`` = 0.1, 0.3, 1, 3, 10.
* ``at-bound``: ``r = min_ratio(delta) = (1-delta)**2 / (delta (2-delta))`` (49.25 for 1%).
* ``ordinary``: standard normal vectors (q near 1).
* ``constant``: ``c * ones`` for c = 1, -0.375, 7.5.
* ``mixed-scale``: a few huge components among many tiny ones.
* ``large``: x**2 near or beyond the dtype's overflow (see :func:`_large_scales`): float16
  squares overflow float16 but not float32; other dtypes come within a factor 4 d of overflow.
* ``gain-extreme``: vectors concentrated on the channels with the largest, smallest and
  negative gain (and the first and last channel: broadcasting errors show there).

Inputs and weights are rounded to the probe dtype first, so the implementation sees exactly the
values the float64 reference :func:`rmsnorm_eps.numerics.rmsnorm_reference` used.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmsnorm_eps import __version__, numerics
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.kernels import mean_square_rows
from rmsnorm_eps.parity.dtypes import dtype_info, round_to

__all__ = [
    "CATEGORIES",
    "GAIN_CONVENTIONS",
    "PROBE_FORMAT",
    "REFERENCE_NAME",
    "SMALL_CATEGORIES",
    "ProbeSet",
    "ProbeSummary",
    "load_probes",
    "make_probes",
    "probe_bytes",
    "write_probes",
]

PROBE_FORMAT = "rmsnorm-eps-probes/1"
REFERENCE_NAME = (
    "rmsnorm_eps.numerics.rmsnorm_reference: float64, y = g * x / sqrt(mean(x^2) + eps) "
    "over the last axis, scaled by max|x| so no intermediate overflows"
)
CATEGORIES = (
    "zero",
    "tiny",
    "near-eps",
    "at-bound",
    "ordinary",
    "constant",
    "mixed-scale",
    "large",
    "gain-extreme",
)
#: Categories whose q/eps is small enough for eps to matter.
SMALL_CATEGORIES = ("tiny", "near-eps", "at-bound")
GAIN_CONVENTIONS = ("w", "1+w")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
#: Largest probe set read: n * d values per float array (make_probes writes about 35 rows, so
#: this allows d up to about 479,000). Members are checked against it, and against the shapes
#: the metadata declares, from the zip directory, before anything is decompressed.
MAX_PROBE_VALUES = 1 << 24
#: Largest metadata, category and category-name members (a few hundred bytes when written).
_MAX_SMALL_MEMBER = 1 << 20
#: A .npy header is at most 64 KiB (format 1.0) plus its 10-byte prefix.
_NPY_HEADER_MAX = 65536 + 12


@dataclass(frozen=True)
class ProbeSet:
    """Probe inputs (n, d), their float64 reference outputs, weights and metadata.

    ``weight`` is what the implementation is given; ``gain`` the multiplier the reference applies:
    ``gain = weight`` (convention ``w``) or ``1 + weight`` (convention ``1+w``).
    ``category[i]`` indexes :data:`CATEGORIES`; ``q[i] = mean(inputs[i]**2)`` (+inf where it
    exceeds float64).
    """

    inputs: np.ndarray
    reference: np.ndarray
    weight: np.ndarray
    gain: np.ndarray
    category: np.ndarray
    q: np.ndarray
    eps: float
    dtype: str
    seed: int
    gain_kind: str
    gain_convention: str
    delta: float
    bound_ratio: float
    version: str = __version__

    @property
    def dim(self) -> int:
        return int(self.inputs.shape[1])

    @property
    def count(self) -> int:
        return int(self.inputs.shape[0])

    def rows(self, name: str) -> np.ndarray:
        """Row indices of category ``name``."""
        return np.flatnonzero(self.category == CATEGORIES.index(name))

    def metadata(self) -> dict[str, Any]:
        """The metadata stored with the probes (JSON-serializable, fixed key order)."""
        return {
            "format": PROBE_FORMAT,
            "tool": "rmsnorm-eps",
            "version": self.version,
            "eps": self.eps,
            "dim": self.dim,
            "dtype": self.dtype,
            "seed": self.seed,
            "gain": self.gain_kind,
            "gain_convention": self.gain_convention,
            "delta": self.delta,
            "bound_ratio": self.bound_ratio,
            "axis": -1,
            "reference": REFERENCE_NAME,
        }


def _with_q(v: np.ndarray, q: float) -> np.ndarray:
    """``v`` rescaled so that mean(v**2) = q (before rounding to the dtype)."""
    return v * math.sqrt(q / float(np.mean(v * v)))


def _random_gain(rng: np.random.Generator, d: int) -> np.ndarray:
    """Effective gain 1 + 0.1 N(0, 1) with extreme channels: 30, 0.01 and -2 (as d allows)."""
    g = 1.0 + 0.1 * rng.standard_normal(d)
    picks = rng.permutation(d)[:3]
    for channel, value in zip(picks, (30.0, 0.01, -2.0), strict=False):
        g[channel] = value
    return g


def _resolve_gain(
    gain: str | np.ndarray, d: int, dtype: str, convention: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, str]:
    """Return (weight, effective gain, description); weight is rounded to the dtype."""
    offset = 1.0 if convention == "1+w" else 0.0
    if isinstance(gain, str) and gain == "ones":
        g_eff, kind = np.ones(d), "ones"
    elif isinstance(gain, str) and gain == "random":
        g_eff, kind = _random_gain(rng, d), "random"
    elif isinstance(gain, str):
        raise InvalidParameterError(f"gain must be 'ones', 'random' or an array, got {gain!r}")
    else:
        w = np.asarray(gain, dtype=np.float64)
        if w.shape != (d,):
            raise InvalidParameterError(f"gain must have shape ({d},), got {w.shape}")
        if not bool(np.all(np.isfinite(w))):
            raise InvalidParameterError("gain holds NaN or inf")
        g_eff, kind = w + offset, "given"
    weight = round_to(g_eff - offset, dtype)
    if not bool(np.all(np.isfinite(weight))):
        raise InvalidParameterError(f"gain does not fit in {dtype}")
    return weight, weight + offset, kind


def _large_scales(dtype: str, d: int) -> tuple[float, ...]:
    """Magnitudes of the ``large`` rows (each component is this times U(0.5, 1)).

    float16: 0.5, 2 and 8 times sqrt(65504) (128, 512, 2048): x**2 overflows float16 but not
    float32, where common implementations (torch, Hugging Face, llama.cpp) reduce. Other
    dtypes: 1/16, 1/4 and 1/2 of sqrt(max / d), so x**2 nears the dtype's overflow while the
    sum of squares still fits in it.
    """
    info = dtype_info(dtype)
    if dtype == "float16":
        root = math.sqrt(info.max)
        return (0.5 * root, 2.0 * root, 8.0 * root)
    top = math.sqrt(info.max / d)
    return (top / 16.0, top / 4.0, top / 2.0)


def _category_rows(
    rng: np.random.Generator, d: int, eps: float, dtype: str, bound: float, gain: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    info = dtype_info(dtype)
    rows: list[tuple[str, np.ndarray]] = [("zero", np.zeros(d))]
    tiny_q = [r * eps for r in (1e-4, 1e-3, 1e-2)]
    tiny_q += [k * k * eps * eps for k in (0.3, 1.0, 3.0) if k * k * eps < 0.05]
    rows += [("tiny", _with_q(rng.standard_normal(d), q)) for q in sorted(tiny_q)]
    rows += [
        ("near-eps", _with_q(rng.standard_normal(d), r * eps)) for r in (0.1, 0.3, 1.0, 3.0, 10.0)
    ]
    rows += [("at-bound", _with_q(rng.standard_normal(d), bound * eps)) for _ in range(2)]
    rows += [("ordinary", rng.standard_normal(d)) for _ in range(8)]
    rows += [("constant", np.full(d, c)) for c in (1.0, -0.375, 7.5)]
    huge = min(100.0, math.sqrt(info.max / d) / 4.0)
    for tiny_scale in (1e-3, 1e-4):
        v = tiny_scale * rng.standard_normal(d)
        k = max(1, d // 32)
        picks = rng.permutation(d)[:k]
        v[picks] = huge * np.where(rng.random(k) < 0.5, -1.0, 1.0)
        rows.append(("mixed-scale", v))
    for scale in _large_scales(dtype, d):
        mags = scale * rng.uniform(0.5, 1.0, d)
        signs = np.where(rng.random(d) < 0.5, -1.0, 1.0)
        rows.append(("large", np.minimum(mags, info.max / 2.0) * signs))
    channels = [int(np.argmax(gain)), int(np.argmin(np.abs(gain))), int(np.argmin(gain)), 0, d - 1]
    for channel in dict.fromkeys(channels):
        v = 0.01 * rng.standard_normal(d)
        v[channel] = 1.0
        rows.append(("gain-extreme", v))
    return rows


def make_probes(
    dim: int,
    eps: float,
    *,
    gain: str | np.ndarray = "ones",
    dtype: str = "float32",
    seed: int = 0,
    gain_convention: str = "w",
    delta: float = 0.01,
) -> ProbeSet:
    """Build the probe set: same arguments, same bytes (numpy's PCG64 seeded with ``seed``)."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
    e = numerics.validate_eps(eps)
    dtype_info(dtype)
    if gain_convention not in GAIN_CONVENTIONS:
        raise InvalidParameterError(
            f"gain convention must be 'w' or '1+w', got {gain_convention!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidParameterError(f"seed must be an integer >= 0, got {seed!r}")
    dl = numerics.validate_delta(delta)
    bound = float(numerics.min_ratio(dl))
    rng = np.random.default_rng(seed)
    weight, g_eff, kind = _resolve_gain(gain, dim, dtype, gain_convention, rng)
    kept: list[tuple[str, np.ndarray]] = []
    for name, row in _category_rows(rng, dim, e, dtype, bound, g_eff):
        rounded = round_to(row, dtype)
        if name != "zero" and not bool(np.any(rounded)):
            continue  # underflowed to zero in this dtype: the zero row already covers it
        kept.append((name, rounded))
    inputs = np.stack([r for _, r in kept]).astype(np.float64)
    category = np.array([CATEGORIES.index(n) for n, _ in kept], dtype=np.int16)
    reference = numerics.rmsnorm_reference(inputs, e, g_eff)
    q = mean_square_rows(inputs)
    return ProbeSet(
        inputs=inputs,
        reference=reference,
        weight=weight,
        gain=g_eff,
        category=category,
        q=q,
        eps=e,
        dtype=dtype,
        seed=seed,
        gain_kind=kind,
        gain_convention=gain_convention,
        delta=dl,
        bound_ratio=bound,
    )


@dataclass(frozen=True)
class ProbeSummary:
    """What ``rmsnorm-eps probe`` reports: the probe set and where it was written."""

    command: ClassVar[str] = "probe"  # names its reporter (rmsnorm_eps.reports)

    probes: ProbeSet
    path: str | None


# --------------------------------------------------------------------------- file format


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


def load_probes(path: str | os.PathLike[str]) -> ProbeSet:
    """Read a probe file written by :func:`write_probes` (never unpickles; checks every array)."""
    from rmsnorm_eps.dumps import check_regular_file

    p = Path(path)
    check_regular_file(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise InputFileError(p, f"cannot read: {exc.strerror or exc}") from None
    if head == b"\x93NUM":
        raise InputFileError(p, "not a probe .npz file (a single .npy array)")
    if head not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise InputFileError(p, "not a probe .npz file (not a zip archive)")
    try:
        data = np.load(p, allow_pickle=False)
    except Exception as exc:
        raise InputFileError(p, f"not a probe .npz file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputFileError(p, "not a probe .npz file (a single .npy array)")
    with data:
        zf = data.zip
        assert zf is not None  # an NpzFile holds its open archive
        sizes = {i.filename: i.file_size for i in zf.infolist()}
        for key in ("metadata", "category", "category_names"):
            if sizes.get(f"{key}.npy", 0) > _MAX_SMALL_MEMBER:
                raise InputFileError(
                    p,
                    f"member declares {sizes[f'{key}.npy']} bytes (a probe file's is small)",
                    key=key,
                )
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
        eps = _meta(meta, p, "eps", float)
        dim = _meta(meta, p, "dim", int)
        dtype = _meta(meta, p, "dtype", str)
        if dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise InputFileError(p, f"unknown dtype {dtype!r}", key="metadata")
        convention = _meta(meta, p, "gain_convention", str)
        if convention not in GAIN_CONVENTIONS:
            raise InputFileError(p, f"unknown gain convention {convention!r}", key="metadata")
        names = _member(data, p, "category_names")
        if tuple(str(n) for n in names.tolist()) != CATEGORIES:
            raise InputFileError(p, "unexpected category names", key="category_names")
        category = _member(data, p, "category")
        if category.dtype.kind not in "iu" or category.ndim != 1:
            raise InputFileError(p, "expected a 1-D integer array", key="category")
        if category.size and (category.min() < 0 or category.max() >= len(CATEGORIES)):
            raise InputFileError(p, "category index out of range", key="category")
        n = int(category.shape[0])
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
        inputs = _float_array(data, p, "inputs", (n, dim))
        reference = _float_array(data, p, "reference", (n, dim))
        weight = _float_array(data, p, "weight", (dim,))
        gain = _float_array(data, p, "gain", (dim,))
        q = _member(data, p, "q")
        if q.dtype != np.float64 or q.shape != (n,) or not bool(np.all(q >= 0.0)):
            raise InputFileError(p, f"expected {n} float64 values >= 0", key="q")
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
    )
