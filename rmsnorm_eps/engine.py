"""The streaming engine shared by ``ratio``, ``compare`` and ``capture --summary-only``.

* :func:`iter_q_chunks`: the q values of a source, in bounded chunks (stored q, or
  ``q = mean(x**2)`` over the last axis of raw activations, with the float32 fast path and exact
  refinement of every q that decides anything: :class:`Decisions`);
* :func:`fold_chunks`: feeds the chunks to an accumulator (and to a :class:`PositionSplit` when
  the dump carries token positions, read by a :class:`SequentialReader`);
* :func:`unravel`: a flat index back to a multi-dimensional one;
* :class:`ReportTotals`: the aggregates every per-layer report exposes (count, violations,
  nonfinite, zero vectors, violation fraction, layers affected, the model's safe eps).

The data path is source -> chunks -> accumulator; nothing here knows a report format.

Why one module: the chunk iterators, the position split and the fold share one contract
(chunks in storage order, indices unravelled the same way) that is read and tested together;
the long-row and Fortran-order readers added for bounded memory are part of that contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.kernels import (
    RAW_ROW_MAX,
    Refiner,
    RowMoments,
    RowSquares,
    bf16_to_float32,
    mean_square_rows,
    mean_square_rows_bf16,
    mean_square_rows_fast,
    variance_rows,
)
from rmsnorm_eps.safe_eps import model_safe_eps
from rmsnorm_eps.sources.interface import ArraySource
from rmsnorm_eps.sources.raw import DEFAULT_CHUNK_BYTES
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, NegativeValue, Quantity, decade_edge

if TYPE_CHECKING:
    from rmsnorm_eps.config.model import NormConfig

__all__ = [
    "Decisions",
    "PositionSplit",
    "ReportTotals",
    "SequentialReader",
    "decisions_for",
    "fold_chunks",
    "iter_q_chunks",
    "layer_quantities",
    "unravel",
]


#: The norm kinds of a config (``rmsnorm_eps.config.model.NORMS``): only ``layer`` divides by v.
_NORM_KINDS = ("rms", "layer", "gated-rms", "l2")


def layer_quantities(
    names: Sequence[str], norm: str | None, config: NormConfig | None
) -> dict[str, Quantity]:
    """The quantity of each layer: the ``norm`` of the config entry its name matches when the
    config gives one (``norm: layer`` -> v), else ``norm`` (the user's ``--norm``; default
    rms -> q). ``norm`` must be one of ``rms``, ``layer``, ``gated-rms``, ``l2`` or None."""
    if norm is not None and norm not in _NORM_KINDS:
        raise InvalidParameterError(
            f"norm must be one of {', '.join(_NORM_KINDS)}, got {str(norm)[:40]!r}"
        )
    out: dict[str, Quantity] = {}
    for name in names:
        kind = norm
        settings = config.settings_for(name) if config is not None else None
        if settings is not None and isinstance(settings.norm.value, str):
            kind = settings.norm.value
        out[name] = "v" if kind == "layer" else "q"
    return out


def unravel(flat: int, shape: tuple[int, ...], order: str) -> tuple[int, ...]:
    """The multi-dimensional index of flat index ``flat`` over ``shape`` in ``order``."""
    if not shape:
        return ()
    if len(shape) == 1 and 0 <= flat < shape[0]:  # the common case, without numpy's call
        return (int(flat),)
    return tuple(int(i) for i in np.unravel_index(flat, shape, order=order))  # type: ignore[call-overload]


@dataclass(frozen=True)
class Decisions:
    """What a q value decides: the sorted q thresholds (bound and decade edges) and top_k.

    Given to :func:`iter_q_chunks`, it lets raw float32/float16/bfloat16 activations take the
    float32 fast path: every q that could fall on the other side of a threshold, be among the
    ``top_k`` smallest or be the largest of the rows read so far is recomputed exactly, so
    reports are identical to the exact float64 path (see :class:`rmsnorm_eps.kernels.Refiner`).
    """

    thresholds: np.ndarray
    top_k: int


def decisions_for(eps: float, min_ratio: float, top_k: int) -> Decisions:
    """The thresholds :class:`~rmsnorm_eps.summary.LayerAccumulator` compares q with."""
    ts = {numerics.q_threshold(eps, min_ratio)}
    ts.update(numerics.q_threshold(eps, decade_edge(k)) for k in range(DECADE_MIN, DECADE_MAX + 1))
    return Decisions(np.array(sorted(ts), np.float64), top_k)


def iter_q_chunks(
    source: ArraySource,
    raw: bool,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = 1,
    decisions: Decisions | None = None,
    quantity: Quantity = "q",
) -> tuple[tuple[int, ...], str, int | None, Iterator[tuple[int, np.ndarray]]]:
    """Return ``(q_shape, index_order, d, chunks)`` for a source.

    ``chunks`` yields ``(start, q)``: ``q`` is a 1-D array of q values whose first element has
    flat index ``start`` in ``index_order`` ('C' or 'F') over ``q_shape``. In raw mode
    ``q = mean(x**2)`` over the last axis of activations of shape ``(..., d)``; otherwise the
    stored values are q (bfloat16 q values come as their exact float32). ``q`` is valid until
    the next iteration. With ``threads > 1`` reading and the q kernel run on that many worker
    threads, a few chunks ahead; the chunks still arrive in order. With ``decisions``, raw
    activations take the float32 fast path with exact refinement (the q values that decide
    nothing are then within ``d * 2**-24`` relative, typically 1e-7).

    ``quantity="v"`` (LayerNorm) computes, in raw mode, the variance
    ``v = mean((x - mean x)**2)`` over the last axis instead, exactly in float64 with the mean
    removed first (:func:`rmsnorm_eps.kernels.variance_rows`; never the float32 fast path);
    stored values are then taken as v.
    """
    shape = source.shape
    order = source.order
    itemsize = source.dtype.itemsize
    bf16 = source.stored_as == "bfloat16"
    if source.size == 0:
        raise InputFileError(source.path, f"empty array (shape {shape})", key=source.key)
    if not raw:
        per = max(1, chunk_bytes // itemsize)

        def as_q(start: int, values: np.ndarray) -> np.ndarray:
            return bf16_to_float32(values) if bf16 else values

        return shape, order, None, source.iter_mapped(per, as_q, threads)
    if len(shape) == 0:
        raise InputFileError(
            source.path,
            "--raw needs activations of shape (..., d), got a 0-d array",
            key=source.key,
        )
    d = shape[-1]
    q_shape = shape[:-1]
    if d > RAW_ROW_MAX:
        raise InputFileError(
            source.path,
            f"--raw rows of {d} values: over the {RAW_ROW_MAX} (2**34) a row may have",
            key=source.key,
        )
    pieces = _pieces(source, chunk_bytes, quantity)
    if pieces is not None:
        return pieces
    if order == "F" and len(shape) > 1:  # two passes (v) or one (q) over the whole file
        fortran = _fortran_raw_v if quantity == "v" else _fortran_raw_q
        return q_shape, "F", d, fortran(source, chunk_bytes)
    rows = max(1, chunk_bytes // (d * itemsize))
    if quantity == "v":

        def v_rows(start: int, values: np.ndarray) -> np.ndarray:
            return variance_rows(values.reshape(-1, d), bf16)

        v_chunks = source.iter_mapped(rows * d, v_rows, threads)
        return q_shape, "C", d, ((start // d, v) for start, v in v_chunks)

    def exact_rows(x: np.ndarray) -> np.ndarray:
        return mean_square_rows_bf16(x) if bf16 else mean_square_rows(x)

    refiner = None if decisions is None else Refiner(decisions.thresholds, decisions.top_k)

    def q_rows(start: int, values: np.ndarray) -> np.ndarray:
        x = values.reshape(-1, d)
        fast = None if refiner is None else mean_square_rows_fast(x, bf16)
        if fast is None:
            return exact_rows(x)
        q, rel = fast
        assert refiner is not None
        refiner.refine(q, rel, lambda rows: exact_rows(x[rows]))
        return q

    chunks = source.iter_mapped(rows * d, q_rows, threads)
    return q_shape, "C", d, _gathered((start // d, q) for start, q in chunks)


#: q values of consecutive raw chunks handed on at once (512 KiB of float64): the summaries'
#: per-call work is then paid once per this many rows, not once per chunk of a few hundred.
GATHER_Q = 1 << 16


def _gathered(chunks: Iterator[tuple[int, np.ndarray]]) -> Iterator[tuple[int, np.ndarray]]:
    """The same q values as ``chunks`` (consecutive, each a new array), joined into runs of
    about :data:`GATHER_Q` values."""
    parts: list[np.ndarray] = []
    first = have = 0
    for start, q in chunks:
        if not parts:
            first = start
        parts.append(q)
        have += q.size
        if have >= GATHER_Q:
            yield first, parts[0] if len(parts) == 1 else np.concatenate(parts)
            parts, have = [], 0
    if parts:
        yield first, parts[0] if len(parts) == 1 else np.concatenate(parts)


#: Rows of a Fortran-ordered ``--raw`` file accumulated at a time (float64 sums: 16 MiB per
#: array); a file of more rows is read a block of rows at a time.
F_BLOCK_ROWS = 1 << 21


def _pieces(
    source: ArraySource, chunk_bytes: int, quantity: Quantity
) -> tuple[tuple[int, ...], str, int, Iterator[tuple[int, np.ndarray]]] | None:
    """The ``--raw`` readers whose memory does not depend on the row length or the number of
    rows: rows longer than a chunk (read in pieces, the sum of squares accumulated in float64
    across them), and Fortran-ordered files of more than :data:`F_BLOCK_ROWS` rows (read a
    block of rows at a time). None for the others (whole rows per chunk)."""
    shape = source.shape
    d = shape[-1]
    n = source.size // d
    if source.order == "F" and len(shape) > 1 and n > 1:
        if n <= F_BLOCK_ROWS:
            return None
        if getattr(source, "data_offset", None) is None:  # a compressed stream: once, spilled
            return shape[:-1], "F", d, _spilled_blocks(source, chunk_bytes, quantity)
        return shape[:-1], "F", d, _fortran_blocks(source, chunk_bytes, quantity)
    if d * source.dtype.itemsize <= chunk_bytes:
        return None
    return shape[:-1], "C", d, _long_rows(source, chunk_bytes, quantity)


def _widened(values: np.ndarray, bf16: bool) -> np.ndarray:
    return (bf16_to_float32(values) if bf16 else values).astype(np.float64)


def _row_accumulator(source: ArraySource, n: int, quantity: Quantity) -> RowSquares | RowMoments:
    if quantity == "v":
        return RowMoments(n)
    return RowSquares(n, scaled=source.dtype == np.float64 and source.stored_as is None)


def _long_rows(
    source: ArraySource, chunk_bytes: int, quantity: Quantity
) -> Iterator[tuple[int, np.ndarray]]:
    """Rows longer than a chunk: each chunk (at most ``chunk_bytes`` of stored values, and its
    float64 copy) is split at the row ends and added to its row's running sums."""
    d = source.shape[-1]
    per = max(1, chunk_bytes // source.dtype.itemsize)
    bf16 = source.stored_as == "bfloat16"
    acc = _row_accumulator(source, 1, quantity)
    row = filled = 0
    for _, values in source.iter_elements(per):
        pos = 0
        while pos < values.size:
            take = min(values.size - pos, d - filled)
            acc.add_piece(0, _widened(values[pos : pos + take], bf16))
            filled += take
            pos += take
            if filled == d:
                yield row, acc.finish(d)
                acc = _row_accumulator(source, 1, quantity)
                row += 1
                filled = 0


def _column_segments(
    source: ArraySource, r0: int, r1: int, per: int
) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(lo, hi, values)``: the elements of rows ``r0 <= i < r1`` of a Fortran-ordered file,
    column by column (``values`` are rows ``r0 + lo`` to ``r0 + hi`` of one column). Read in
    place, each byte once, when the source allows it; else from a pass over the stream."""
    d = source.shape[-1]
    n = source.size // d
    iter_range = getattr(source, "iter_range", None)
    if iter_range is not None and getattr(source, "data_offset", None) is not None:
        for j in range(d):
            for start, values in iter_range(j * n + r0, r1 - r0, per):
                lo = start - j * n - r0
                yield lo, lo + values.size, values
        return
    for start, values in source.iter_elements(per):
        end = start + values.size
        for j in range(start // n, (end - 1) // n + 1):
            a = max(start, j * n + r0)
            b = min(end, j * n + r1)
            if a < b:
                yield a - j * n - r0, b - j * n - r0, values[a - start : b - start]


def _fortran_blocks(
    source: ArraySource, chunk_bytes: int, quantity: Quantity
) -> Iterator[tuple[int, np.ndarray]]:
    """A Fortran-ordered file of many rows, :data:`F_BLOCK_ROWS` rows at a time: memory a few
    float64 arrays of that length, whatever the number of rows."""
    d = source.shape[-1]
    n = source.size // d
    per = max(1, chunk_bytes // source.dtype.itemsize)
    bf16 = source.stored_as == "bfloat16"
    for r0 in range(0, n, F_BLOCK_ROWS):
        r1 = min(n, r0 + F_BLOCK_ROWS)
        acc = _row_accumulator(source, r1 - r0, quantity)
        for lo, hi, values in _column_segments(source, r0, r1, per):
            acc.add(slice(lo, hi), _widened(values, bf16))
        yield r0, acc.finish(d)


#: Temporary space left free beside a spilled member (:func:`_spilled_blocks`).
SPILL_MARGIN = 256 << 20


def _spilled_blocks(
    source: ArraySource, chunk_bytes: int, quantity: Quantity
) -> Iterator[tuple[int, np.ndarray]]:
    """A compressed (stream-only) Fortran-ordered member of more than :data:`F_BLOCK_ROWS`
    rows: decompressed once into a temporary file (the system's temporary directory, removed
    afterwards), then read in place a block of rows at a time (:func:`_fortran_blocks`), so
    that the time is linear in the data, not one decompression per block. Refused, in one
    line, when the temporary directory lacks the space (the member's stored size plus
    :data:`SPILL_MARGIN`)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from rmsnorm_eps.sources.raw import RawArraySource

    where = tempfile.gettempdir()
    need = source.size * source.dtype.itemsize
    free = shutil.disk_usage(where).free
    if need + SPILL_MARGIN > free:
        raise InputFileError(
            source.path,
            f"a compressed Fortran-order --raw array of {source.size // source.shape[-1]} rows "
            f"is read through a temporary copy of {need} bytes, and {where} has {free} free "
            "(set TMPDIR, or save the array uncompressed or in C order)",
            key=source.key,
        )
    per = max(1, chunk_bytes // source.dtype.itemsize)
    fd, name = tempfile.mkstemp(prefix="rmsnorm-eps-", suffix=".raw")
    try:
        with os.fdopen(fd, "wb") as fh:  # the values come in native byte order
            for _, values in source.iter_elements(per):
                fh.write(np.ascontiguousarray(values).tobytes())
        copy = RawArraySource(
            Path(name),
            source.key,
            np.dtype("=u2") if source.stored_as is not None else source.dtype.newbyteorder("="),
            source.shape,
            "F",
            data_offset=0,
            stored_as=source.stored_as,
        )
        yield from _fortran_blocks(copy, chunk_bytes, quantity)
    finally:
        os.unlink(name)


def _fortran_raw_v(source: ArraySource, chunk_bytes: int) -> Iterator[tuple[int, np.ndarray]]:
    """Fortran-ordered raw activations (element (i, j) at i + N*j): a first pass sums each row
    for its mean, a second accumulates the deviations e = x - mu and their squares in float64
    per row (memory: a few N float64), then ``v = (sum e**2 - (sum e)**2 / d) / d`` as in
    :func:`rmsnorm_eps.kernels.variance_rows`."""
    d = source.shape[-1]
    n = source.size // d
    per = max(1, chunk_bytes // source.dtype.itemsize)
    bf16 = source.stored_as == "bfloat16"
    total = np.zeros(n, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        for start, values in source.iter_elements(per):
            np.add.at(total, (start + np.arange(values.size)) % n, _widened(values, bf16))
        mu = total / d
        s1 = np.zeros(n, np.float64)
        s2 = np.zeros(n, np.float64)
        for start, values in source.iter_elements(per):
            rows = (start + np.arange(values.size)) % n
            e = _widened(values, bf16) - mu[rows]
            np.add.at(s1, rows, e)
            np.add.at(s2, rows, e * e)
        v = np.maximum((s2 - s1 * s1 / d) / d, 0.0)
    yield 0, v


def _fortran_raw_q(source: ArraySource, chunk_bytes: int) -> Iterator[tuple[int, np.ndarray]]:
    """Raw activations stored in Fortran order: element (i, j) sits at i + N*j, so the file is
    d blocks of N values. Squares are accumulated in float64 per row (memory: N float64),
    after a first pass for the row maxima when the data are float64 (overflow safety)."""
    d = source.shape[-1]
    n = source.size // d
    per = max(1, chunk_bytes // source.dtype.itemsize)
    scale = np.ones(n, np.float64)
    if source.dtype == np.float64:
        m = np.zeros(n, np.float64)
        for start, values in source.iter_elements(per):
            rows = (start + np.arange(values.size)) % n
            np.maximum.at(m, rows, np.abs(values))
        scale = np.where((m > 0) & np.isfinite(m), m, 1.0)
    acc = np.zeros(n, np.float64)
    for start, values in source.iter_elements(per):
        rows = (start + np.arange(values.size)) % n
        if source.stored_as == "bfloat16":
            values = bf16_to_float32(values)
        v = values.astype(np.float64) / scale[rows]
        with np.errstate(over="ignore"):  # a row holding inf has scale 1: its q is inf (counted)
            np.add.at(acc, rows, v * v)
    with np.errstate(over="ignore"):
        q = acc / d * scale * scale
    yield 0, q


class _Folding(Protocol):
    """What :class:`PositionSplit` needs from an accumulator."""

    count: int

    def update(self, values: np.ndarray, start: int) -> None: ...


F = TypeVar("F", bound=_Folding)


class PositionSplit(Generic[F]):
    """Position 0 and positions > 0 of one layer, each folded into its own accumulator.

    Each accumulator sees only its subset, so its flat indices count within that subset; the
    layer index of every value it still keeps (``kept(acc)``: the worst, the minimum, the
    nonfinite examples) is remembered as it is folded, and :meth:`results` returns copies with
    those indices put back (``remap(acc, subset_index -> layer_index)``). Memory stays bounded
    by what the accumulators keep. Used by ``ratio``, ``compare`` and ``capture
    --summary-only``.
    """

    def __init__(
        self,
        make: Callable[[], F],
        kept: Callable[[F], set[int]],
        remap: Callable[[F, Mapping[int, int]], F],
    ) -> None:
        self.first = make()
        self.other = make()
        self._kept = kept
        self._remap = remap
        self._maps: tuple[dict[int, int], dict[int, int]] = ({}, {})

    def update(self, values: np.ndarray, start: int, is_first: np.ndarray) -> None:
        """Fold a chunk whose first value has layer index ``start``; ``is_first`` marks the
        values at position 0."""
        for acc, where, sel in (
            (self.first, self._maps[0], is_first),
            (self.other, self._maps[1], ~is_first),
        ):
            idx = np.flatnonzero(sel)
            sub_start = acc.count
            acc.update(values[idx], sub_start)
            kept = self._kept(acc)
            for i in kept:
                if i >= sub_start and i not in where:
                    where[i] = start + int(idx[i - sub_start])
            for i in [i for i in where if i not in kept]:
                del where[i]

    def results(self) -> tuple[F, F]:
        """Copies of the (first, other) accumulators with layer indices."""
        return self._remap(self.first, self._maps[0]), self._remap(self.other, self._maps[1])


class SequentialReader:
    """Hands out consecutive slices of an integer companion array (e.g. token positions), in
    file order, as int64; memory: one chunk of the companion."""

    def __init__(self, src: ArraySource, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self._it = src.iter_elements(max(1, chunk_bytes // src.dtype.itemsize))
        self._buf = np.empty(0, np.int64)
        self._next = 0  # flat index of self._buf[0]

    def read(self, start: int, n: int) -> np.ndarray:
        """The ``n`` values from flat index ``start``, which must follow the previous read."""
        if start != self._next:  # q chunks must arrive in order
            raise RuntimeError(f"position reader at {self._next}, asked for {start}")
        parts = [self._buf]
        have = self._buf.size
        while have < n:
            _, chunk = next(self._it)
            parts.append(chunk.astype(np.int64))
            have += chunk.size
        data = np.concatenate(parts) if len(parts) > 1 else self._buf
        self._buf = data[n:]
        self._next += n
        return data[:n]


def fold_chunks(
    src: ArraySource,
    chunks: Iterator[tuple[int, np.ndarray]],
    acc: Any,
    split: PositionSplit[Any] | None,
    positions: SequentialReader | None,
    q_shape: tuple[int, ...],
    order: str,
    quantity: Quantity = "q",
) -> None:
    """Feed every q chunk to ``acc`` (and to the first-token split when the dump has
    positions). A negative q (:class:`NegativeValue`, raised by either accumulator) becomes an
    :class:`InputFileError` naming the file, key and multi-dimensional index."""
    try:
        for start, q in chunks:
            acc.update(q, start)
            if split is not None and positions is not None:
                split.update(q, start, positions.read(start, q.size) == 0)
    except NegativeValue as exc:
        where = unravel(exc.index, q_shape, order)
        raise InputFileError(
            src.path,
            f"negative {quantity} {exc.value!r} at index {list(where)} "
            f"({quantity} is a mean of squares)",
            key=src.key,
        ) from None


class _Layer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def violations(self) -> int: ...

    @property
    def nonfinite(self) -> int: ...

    @property
    def zero_count(self) -> int: ...


class ReportTotals:
    """Aggregates over ``self.layers`` shared by the per-layer reports (ratio, compare):
    ``count``, ``violations``, ``nonfinite``, ``zero_count``, ``violation_fraction = violations
    / count`` (0 for no input), ``layers_affected`` (names of layers with a violation, in
    order) and the model's ``safe_eps`` (:func:`rmsnorm_eps.safe_eps.model_safe_eps`)."""

    layers: Sequence[_Layer]

    @property
    def count(self) -> int:
        return sum(layer.count for layer in self.layers)

    @property
    def violations(self) -> int:
        return sum(layer.violations for layer in self.layers)

    @property
    def nonfinite(self) -> int:
        return sum(layer.nonfinite for layer in self.layers)

    @property
    def violation_fraction(self) -> float:
        n = self.count
        return self.violations / n if n else 0.0

    @property
    def layers_affected(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers if layer.violations)

    @property
    def zero_count(self) -> int:
        return sum(layer.zero_count for layer in self.layers)

    @property
    def safe_eps(self) -> float | None:
        """The model's safe eps: the smallest safe eps of its layers (None when a layer has
        none, or when no layer has a positive finite q); see :attr:`safe_eps_note`."""
        return model_safe_eps(self.layers)[0]

    @property
    def safe_eps_margin(self) -> float | None:
        """The smallest margin (decades) of the layers from their eps (compare: ``--to``)."""
        return model_safe_eps(self.layers)[1]

    @property
    def safe_eps_note(self) -> str:
        return model_safe_eps(self.layers)[2]
