"""The float32 sums of squares of float16 and bfloat16 rows, written for numba (the ``[fast]``
extra) and compiled by it to LLVM IR that :mod:`rmsnorm_eps.kernels_compiled` runs.

Imported only by :mod:`rmsnorm_eps.kernels_compiled` when its cache holds no IR for this
machine (the first run, or after an upgrade): numba compiles the two kernels once, and later
processes load the IR with llvmlite alone, without importing numba (about 0.08 s against 0.5 s).

Each element is widened in registers, ``s = sum(float32(x)**2)`` is accumulated in float32,
and the row's ``s`` is stored in float64 (not yet divided by d):

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
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["FASTMATH", "llvm_ir"]

#: The fastmath flags of the kernels (see the module docstring): reordering and FMA only.
FASTMATH = frozenset({"reassoc", "contract"})


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


def _float16_rows(bits: Any, n: int, d: int, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(n):
        base = i * d
        s = np.float32(0.0)
        for j in range(d):
            v = _half_to_float(bits[base + j])
            s += v * v
        out[i] = s


def _bfloat16_rows(bits: Any, n: int, d: int, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(n):
        base = i * d
        s = np.float32(0.0)
        for j in range(d):
            v = _bfloat_to_float(bits[base + j])
            s += v * v
        out[i] = s


#: ``void kernel(const uint16_t *bits, int64_t n, int64_t d, double *out)``: ``n`` C-ordered
#: rows of ``d`` elements, one float64 sum per row.
_SIGNATURE = types.void(
    types.CPointer(types.uint16), types.int64, types.int64, types.CPointer(types.float64)
)


def llvm_ir() -> dict[str, tuple[str, str]]:
    """Compile both kernels for this machine: ``{"float16" | "bfloat16": (LLVM IR, symbol)}``,
    the symbol being the C-callable entry point of that IR (:data:`_SIGNATURE`)."""
    options: dict[str, Any] = {
        "fastmath": set(FASTMATH),
        "error_model": "numpy",
        "boundscheck": False,
    }
    out = {}
    for name, fn in (("float16", _float16_rows), ("bfloat16", _bfloat16_rows)):
        compiled = numba.cfunc(_SIGNATURE, **options)(fn)
        out[name] = (compiled.inspect_llvm(), compiled.native_name)
    return out
