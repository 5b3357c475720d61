"""The compiled float16/bfloat16 kernels of the ``[fast]`` extra, loaded into this process:
``float32_sums(bits, bf16)``, imported only by :mod:`rmsnorm_eps.kernel_choice` when they are
chosen.

numba compiles the kernels of :mod:`rmsnorm_eps.kernels_numba` to LLVM IR once per machine;
the IR is kept in a cache file, and later processes turn it into machine code with llvmlite
alone (numba's own code generator, installed with it), without importing numba: about 0.08 s
of start-up here against 0.5 s for numba's import and its own cache (whose loading builds
numba's typing and target registries).

The cache file ``kernels-<key>.json`` holds the two kernels' IR and entry points; ``key`` is
a hash of the kernels' source, the numba and llvmlite versions and this CPU (name, features,
target triple), so an upgrade or another machine compiles anew. It is written (atomically)
to the first writable directory of: ``$NUMBA_CACHE_DIR/rmsnorm_eps`` when ``NUMBA_CACHE_DIR``
is set (then only there), else this package's ``__pycache__``, else
``$XDG_CACHE_HOME/rmsnorm-eps`` (default ``~/.cache/rmsnorm-eps``). Where none is writable (a
read-only install without a home directory) the IR stays in memory: numba compiles it in every
process, same results. A cache file that cannot be read or compiled is ignored and replaced.
Like numba's own cache, it is code: keep the directory writable only by its owner.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import llvmlite
import llvmlite.binding as llvm
import numpy as np

__all__ = ["SAVED", "SOURCE", "cache_dirs", "float32_sums"]

_KERNELS = ("float16", "bfloat16")
_PROTOTYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
)

IR = dict[str, tuple[str, str]]  # kernel name -> (LLVM IR, entry point)


def cache_dirs() -> list[Path]:
    """The directories the IR cache is looked for and written in, in order."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return [Path(chosen) / "rmsnorm_eps"]
    dirs = [Path(__file__).resolve().parent / "__pycache__"]
    xdg = os.environ.get("XDG_CACHE_HOME")
    with contextlib.suppress(RuntimeError):  # no home directory
        dirs.append(Path(xdg) / "rmsnorm-eps" if xdg else Path.home() / ".cache" / "rmsnorm-eps")
    return dirs


def _machine() -> tuple[str, str, str]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return (
        llvm.get_process_triple(),
        llvm.get_host_cpu_name(),
        llvm.get_host_cpu_features().flatten(),
    )


def _key(machine: tuple[str, str, str]) -> str:
    source = (Path(__file__).resolve().parent / "kernels_numba.py").read_bytes()
    try:
        numba_version = metadata.version("numba")
    except metadata.PackageNotFoundError:
        numba_version = "?"
    parts = [hashlib.sha256(source).hexdigest(), numba_version, llvmlite.__version__, *machine]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _read(name: str) -> IR | None:
    for folder in cache_dirs():
        try:
            data = json.loads((folder / name).read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and all(
            isinstance(data.get(k), list)
            and len(data[k]) == 2
            and all(isinstance(v, str) for v in data[k])
            for k in _KERNELS
        ):
            return {k: (data[k][0], data[k][1]) for k in _KERNELS}
    return None


def _write(name: str, irs: IR) -> Path | None:
    text = json.dumps({k: list(v) for k, v in irs.items()}, sort_keys=True)
    for folder in cache_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".kernels-", dir=folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, folder / name)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            continue
        return folder / name
    return None


def _build(irs: IR, machine: tuple[str, str, str]) -> tuple[Any, dict[str, Any]]:
    """Machine code for the IR: (the execution engine, kept alive; kernel name -> function)."""
    triple, cpu, features = machine
    target = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3
    )
    modules = []
    for name in _KERNELS:
        module = llvm.parse_assembly(irs[name][0])
        module.verify()
        modules.append(module)
    engine = llvm.create_mcjit_compiler(modules[0], target)
    for module in modules[1:]:
        engine.add_module(module)
    engine.finalize_object()
    functions = {}
    for name in _KERNELS:
        address = engine.get_function_address(irs[name][1])
        if not address:
            raise ValueError(f"no entry point {irs[name][1]!r}")
        functions[name] = _PROTOTYPE(address)
    return engine, functions


def _load() -> tuple[Any, dict[str, Any], Literal["cache", "numba"], Path | None]:
    machine = _machine()
    name = f"kernels-{_key(machine)}.json"
    cached = _read(name)
    if cached is not None:
        try:
            engine, functions = _build(cached, machine)
        except (RuntimeError, ValueError):  # unreadable IR: compile anew, replace the file
            pass
        else:
            return engine, functions, "cache", None
    from rmsnorm_eps.kernels_numba import llvm_ir

    irs = llvm_ir()
    saved = _write(name, irs)
    engine, functions = _build(irs, machine)
    return engine, functions, "numba", saved


_ENGINE, _FUNCTIONS, _SOURCE, _SAVED = _load()

#: Where this process's kernels came from: ``cache`` (llvmlite only) or ``numba`` (compiled).
SOURCE: Literal["cache", "numba"] = _SOURCE
#: The cache file written by this process (None: loaded from the cache, or none writable).
SAVED: Path | None = _SAVED


def float32_sums(bits: np.ndarray, bf16: bool) -> np.ndarray:
    """Float32 sums of squares of the C-ordered 2-D uint16 rows ``bits`` (float16 bits, or
    bfloat16 bits with ``bf16``), returned in float64 and not divided by d; within
    :func:`rmsnorm_eps.kernels.fast_error_bound` ``(d)`` of the exact sum where finite and at
    least 2**-100 (times d); a row holding NaN gives NaN, one holding inf (and no NaN) inf.
    The call releases the GIL (ctypes), so chunks may be summed on several threads."""
    if bits.ndim != 2 or bits.dtype != np.uint16 or not bits.flags.c_contiguous:
        raise ValueError("float32_sums: C-ordered 2-D uint16 rows expected")
    n, d = bits.shape
    out = np.empty(n, np.float64)
    if n and d:
        _FUNCTIONS["bfloat16" if bf16 else "float16"](bits.ctypes.data, n, d, out.ctypes.data)
    else:
        out[:] = 0.0
    return out
