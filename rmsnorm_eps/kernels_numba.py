"""Compiled float32 sums of squares of float16 and bfloat16 rows: the ``[fast]`` extra (numba).

Imported only through :mod:`rmsnorm_eps.kernel_choice`, when a 16-bit chunk of a large enough
dump (or ``ratio --kernel numba``) reaches the fast path: importing numba costs about half a
second, which only a dump of a gigabyte or more pays back.

Each element is widened in registers, ``s = sum(float32(x)**2)`` is accumulated in float32,
and the row's ``s`` is returned in float64 (not yet divided by d):

* float16: the bits are an IEEE half, extended to float32 with ``fpext`` (F16C's
  ``vcvtph2ps`` on x86): exact, subnormals, inf and NaN included;
* bfloat16: ``bits << 16`` reinterpreted as float32 is the exact value, inf and NaN included.

A float16 square is at most 65504**2 (about 4.3e9) and at least 2**-48: no float32 overflow or
underflow. bfloat16 squares may overflow to inf or underflow; those rows' sums are inf or below
2**-100 and :class:`rmsnorm_eps.kernels.Refiner` recomputes them exactly, as it does for the
numpy kernels' sums.

**The only fastmath flags are** ``reassoc`` and ``contract``: the compiler may split the sum
into vector lanes, reorder it, and fuse each square into its addition. That is what makes the
loop vectorize (without ``reassoc`` LLVM keeps one sequential chain: 0.65 GB/s here against
37 GB/s). It does not weaken the bound the fast path relies on
(:func:`rmsnorm_eps.kernels.fast_error_bound`): any float32 evaluation of a sum of ``d``
non-negative terms, in any order, with or without FMA, is within ``gamma_d = d u / (1 - d u)``
(u = 2**-24) of the exact sum (Higham, Accuracy and Stability of Numerical Algorithms, 3.1).
No flag that assumes finite values (``nnan``, ``ninf``) is set, so NaN and inf propagate to the
sum as IEEE arithmetic says. The order chosen may differ from one CPU to another, so a sum's
last bits may too; no report shows a fast sum: every q that decides or is shown is recomputed
exactly in float64.

The compiled code is cached on disk (numba's cache: next to this file when that is writable,
else under the user's cache directory; ``NUMBA_CACHE_DIR`` chooses the directory). Where no
cache location is writable (a read-only install without a home directory) the kernels are
compiled in memory each run instead: slower to start, same results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["CACHED", "float32_sums"]

#: The fastmath flags of the kernels (see the module docstring): reordering and FMA only.
FASTMATH = frozenset({"reassoc", "contract"})

#: Read-only C-ordered uint16 rows (a mapped file's chunks are read-only; other arrays are
#: passed as read-only views), float64 output: one compiled version per kernel.
_SIGNATURE = types.void(types.Array(types.uint16, 2, "C", readonly=True), types.float64[::1])


def _half_typing(typingctx: Any, bits: Any) -> Any:
    """float32 of the IEEE half whose bits are ``bits`` (uint16): ``fpext``, exact."""
    sig = types.float32(types.uint16)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return sig, codegen


def _bfloat_typing(typingctx: Any, bits: Any) -> Any:
    """float32 of the bfloat16 whose bits are ``bits`` (uint16): ``bits << 16``, exact."""
    sig = types.float32(types.uint16)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32 = ir.IntType(32)
        word = builder.shl(builder.zext(args[0], i32), ir.Constant(i32, 16))
        return builder.bitcast(word, ir.FloatType())

    return sig, codegen


# typed as Any: numba's stubs give an intrinsic the signature of its typing function
_half_to_float: Any = intrinsic(_half_typing)
_bfloat_to_float: Any = intrinsic(_bfloat_typing)


def _float16_rows(bits: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    n, d = bits.shape
    for i in range(n):
        row = bits[i]
        s = np.float32(0.0)
        for j in range(d):
            v = _half_to_float(row[j])
            s += v * v
        out[i] = s


def _bfloat16_rows(bits: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    n, d = bits.shape
    for i in range(n):
        row = bits[i]
        s = np.float32(0.0)
        for j in range(d):
            v = _bfloat_to_float(row[j])
            s += v * v
        out[i] = s


def _compile(fn: Callable[..., None]) -> tuple[Callable[..., None], bool]:
    """``fn`` compiled for C-ordered uint16 rows, from numba's on-disk cache when a cache
    location is writable (else in memory); and whether it is cached."""
    options: dict[str, Any] = {
        "nogil": True,  # --threads: chunks are summed on several threads at once
        "boundscheck": False,
        "fastmath": set(FASTMATH),
        "error_model": "numpy",
    }
    try:
        return numba.njit(_SIGNATURE, cache=True, **options)(fn), True
    except (RuntimeError, OSError):  # no writable cache location: compile in memory
        return numba.njit(_SIGNATURE, cache=False, **options)(fn), False


_FLOAT16, _CACHED_F16 = _compile(_float16_rows)
_BFLOAT16, _CACHED_BF16 = _compile(_bfloat16_rows)

#: Whether the compiled kernels come from (and went to) numba's on-disk cache.
CACHED = _CACHED_F16 and _CACHED_BF16


def float32_sums(bits: np.ndarray, bf16: bool) -> np.ndarray:
    """Float32 sums of squares of the C-ordered 2-D uint16 rows ``bits`` (float16 bits, or
    bfloat16 bits with ``bf16``), returned in float64 and not divided by d; within
    :func:`rmsnorm_eps.kernels.fast_error_bound` ``(d)`` of the exact sum where finite and at
    least 2**-100 (times d); a row holding NaN gives NaN, one holding inf (and no NaN) inf."""
    out = np.empty(bits.shape[0], np.float64)
    rows = bits.view()
    rows.flags.writeable = False  # the one signature compiled
    (_BFLOAT16 if bf16 else _FLOAT16)(rows, out)
    return out
