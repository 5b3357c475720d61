"""The compiled 16-bit kernels of the ``[fast]`` extra (rmsnorm_eps.kernels_numba, loaded by
rmsnorm_eps.kernels_compiled): within the fast path's bound, reports byte-identical to the numpy
kernels', used only when chosen, numba imported only to compile them once, and a cache location
that cannot be written costs no crash."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps import kernel_choice
from rmsnorm_eps.errors import MissingExtraError
from rmsnorm_eps.kernels import fast_error_bound, mean_square_rows_fast
from tests.conftest import Result

ROOT = Path(__file__).resolve().parents[1]

needs_numba = pytest.mark.skipif(not kernel_choice.installed(), reason="the [fast] extra")


def _bits(x: np.ndarray, kind: str) -> np.ndarray:
    """float32 values as float16 or bfloat16 (truncated) bit patterns, uint16."""
    if kind == "float16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).view(np.uint16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def _exact_sums(bits: np.ndarray, kind: str) -> np.ndarray:
    if kind == "float16":
        wide = bits.view(np.float16).astype(np.float64)
    else:
        wide = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.array([math.fsum((row * row).tolist()) for row in wide])


@needs_numba
@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [1, 3, 64, 4095, 16384])
def test_compiled_sums_are_within_the_fast_bound(kind: str, d: int) -> None:
    from rmsnorm_eps.kernels_compiled import float32_sums

    rng = np.random.default_rng(d)
    rows = max(8, (1 << 17) // d)
    lo = -7 if kind == "float16" else -30  # float16 subnormals; bfloat16 far below 1
    x = (rng.standard_normal((rows, d)) * 10 ** rng.uniform(lo, 4, (rows, 1))).astype(np.float32)
    x[0] = 6e-8  # the smallest float16 subnormal, about; a bfloat16 of 6e-8
    x[1] = 65504.0  # the largest finite float16
    bits = _bits(x, kind)
    got = float32_sums(bits, kind == "bfloat16")
    exact = _exact_sums(bits, kind)
    keep = exact >= 2.0**-100 * d  # the rows the bound covers (others are recomputed)
    assert keep[:2].all() and keep.sum() > rows // 2
    err = np.abs(got[keep] - exact[keep]) / exact[keep]
    bound = fast_error_bound(d)
    assert bound is not None and err.max() <= bound
    assert err.max() < 2e-6  # typical float32 accumulation (1.2e-6 was seen at d = 16384)


@needs_numba
def test_compiled_sums_propagate_nan_and_inf() -> None:
    from rmsnorm_eps.kernels_compiled import float32_sums

    h = np.array([[np.inf, 1, 0, 6e-8], [np.nan, 1, np.inf, 3], [-np.inf, 2, 2, 2]], np.float16)
    got = float32_sums(h.view(np.uint16), False)
    assert np.isinf(got[0]) and np.isnan(got[1]) and np.isinf(got[2])
    b = _bits(
        np.array([[np.inf, 1.0], [np.nan, 1.0], [3e38, 3e38], [1e-30, 0.0]], np.float32), "bfloat16"
    )
    got = float32_sums(b, True)
    assert np.isinf(got[0]) and np.isnan(got[1]) and np.isinf(got[2])  # squares overflow
    assert got[3] < 2.0**-100  # squares underflow: below the bound's floor, recomputed


@needs_numba
@pytest.mark.parametrize("bf16", [False, True])
def test_the_fast_path_uses_the_compiled_kernel_only_when_chosen(bf16: bool) -> None:
    from rmsnorm_eps.kernels_compiled import float32_sums

    rng = np.random.default_rng(5)
    bits = _bits(
        rng.standard_normal((64, 4096)).astype(np.float32), "bfloat16" if bf16 else "float16"
    )
    x = bits if bf16 else bits.view(np.float16)
    compiled = float32_sums(bits, bf16) / 4096
    plain = mean_square_rows_fast(x, bf16)
    with kernel_choice.using("numba"):
        fast = mean_square_rows_fast(x, bf16)
    assert plain is not None and fast is not None
    assert np.array_equal(fast[0], compiled)
    # the two kernels sum in different orders: the last bits differ (the reports do not)
    assert not np.array_equal(plain[0], compiled)
    assert fast[1] == plain[1]


def _report_set(kind: str) -> np.ndarray:
    """96-wide rows: ordinary ones of many scales, subnormals, zeros, inf, NaN, rows exactly at
    the bound q/eps = 4 of eps = 0.25 (q = 1) and at decade edges (q = 0.25, 2.5), and rows one
    16-bit step either side of them."""
    rng = np.random.default_rng(11)
    d = 96
    x = (rng.standard_normal((900, d)) * 10 ** rng.uniform(-6, 1, (900, 1))).astype(np.float32)
    special = [
        np.full(d, 6e-8 if kind == "float16" else 1e-39, np.float32),  # subnormals
        np.zeros(d, np.float32),
        np.full(d, 1.0, np.float32),  # q = 1: exactly at the bound (passes)
        np.full(d, 0.5, np.float32),  # q = 0.25: a decade edge
        np.array([1.0, 2.0] * (d // 2), np.float32),  # q = 2.5: a decade edge
    ]
    step = 2.0**-10 if kind == "float16" else 2.0**-7
    for base in (1.0, 0.5):
        for s in (-step / 2, step):  # one element one step off the tie
            row = np.full(d, base, np.float32)
            row[0] = base * (1 + s)
            special.append(row)
    x = np.concatenate([x, np.array(special * 20, np.float32)])
    x[3, 1] = np.nan
    x[9, 4] = np.inf
    x[12, 2] = -np.inf
    x[13, 5] = np.nan
    x[13, 6] = np.inf
    rng.shuffle(x)
    return _bits(x, kind)


def _save(path: Path, bits: np.ndarray, kind: str) -> Path:
    np.save(path, bits.view(np.float16) if kind == "float16" else bits)
    return path


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the compiled kernel's calls (loading it first)."""
    with kernel_choice.using("numba"):
        real = kernel_choice.sixteen_bit_sums(False)
    assert real is not None
    calls: list[int] = []

    def counting(bits: np.ndarray, bf16: bool) -> np.ndarray:
        calls.append(bits.shape[0])
        return real(bits, bf16)

    monkeypatch.setattr(kernel_choice, "_loaded", counting)
    return calls


@needs_numba
@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_reports_are_byte_identical_between_kernels(
    tmp_path: Path,
    kind: str,
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / f"{kind}.npy"
    _save(path, _report_set(kind), kind)
    calls = _count_calls(monkeypatch)
    dtype = ["--dtype", "bfloat16"] if kind == "bfloat16" else []
    gates = (["--eps", "0.25", "--min-ratio", "4"], ["--eps", "1e-5", "--delta", "0.01"])
    for gate in gates:
        for fmt in ("text", "json"):
            for more in (["--top", "0"], ["--top", "5", "--threads", "2", "--chunk-bytes", "5000"]):
                args = ["ratio", str(path), "--raw", *dtype, *gate, "--format", fmt, *more]
                before = len(calls)
                numba_run = cli(*args, "--kernel", "numba")
                assert len(calls) > before  # the compiled kernel did the sums
                after = len(calls)
                numpy_run = cli(*args, "--kernel", "numpy")
                assert len(calls) == after  # the numpy kernels did
                assert numba_run.exit_code == numpy_run.exit_code == 1
                assert numba_run.stdout.encode() == numpy_run.stdout.encode()
                assert numba_run.stderr == numpy_run.stderr
    text = cli("ratio", str(path), "--raw", *dtype, *gates[0], "--top", "3").stdout
    assert "nonfinite" in text and "zero vector" in text  # the set does hold both kinds


@needs_numba
def test_numpy_kernel_makes_no_call_and_auto_follows_the_size(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.npy"
    _save(path, _report_set("float16")[:200], "float16")
    calls = _count_calls(monkeypatch)
    args = ["ratio", str(path), "--raw", "--eps", "1e-5"]
    cli(*args, "--kernel", "numpy")
    cli(*args)  # auto, a small dump: numpy
    assert calls == []
    size = path.stat().st_size
    monkeypatch.setattr(kernel_choice, "AUTO_MIN_BYTES", {"float16": size, "bfloat16": 1 << 40})
    cli(*args)  # auto, a dump of the size: compiled
    assert calls != []


def test_the_choice_follows_the_option_the_size_and_the_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f16, bf16 = kernel_choice.AUTO_MIN_BYTES["float16"], kernel_choice.AUTO_MIN_BYTES["bfloat16"]
    assert f16 < bf16  # bfloat16's numpy kernels are the faster: numba pays later
    monkeypatch.setattr(kernel_choice, "installed", lambda: True)
    want = kernel_choice.wants_numba
    assert not want("numpy", 10 * bf16, False) and not want("numpy", 10 * bf16, True)
    assert not want("auto", f16 - 1, False) and want("auto", f16, False)
    assert not want("auto", bf16 - 1, True) and want("auto", bf16, True)
    assert want("numba", 1, False) and want("numba", 1, True)
    kernel_choice.check("numba")
    monkeypatch.setattr(kernel_choice, "installed", lambda: False)
    assert not want("auto", 10 * bf16, False) and not want("auto", 10 * bf16, True)
    kernel_choice.check("auto")
    with pytest.raises(MissingExtraError, match=r"\[fast\]"):
        kernel_choice.check("numba")


def test_kernel_numba_without_the_extra_is_one_line_naming_it(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.ones((4, 8), np.float16))
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba fails: not installed
    assert not kernel_choice.installed()
    res = cli("ratio", str(path), "--raw", "--eps", "1e-5", "--kernel", "numba")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert "--kernel numba needs the 'numba' package" in res.stderr and "[fast]" in res.stderr
    ok = cli("ratio", str(path), "--raw", "--eps", "1e-5")  # auto: numpy, no error
    assert ok.exit_code == 0


PROBE = """
import sys, runpy, io, contextlib
sys.argv = ["rmsnorm-eps", *{args!r}]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("rmsnorm_eps", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
print(code, "numba" in sys.modules, "rmsnorm_eps.kernels_compiled" in sys.modules)
"""


def _probe(*args: str, env: dict[str, str] | None = None) -> tuple[str, ...]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=True,
    ).stdout.split()
    return tuple(out)


@needs_numba
def test_numba_is_imported_only_to_compile_the_kernels(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.ones((16, 64), np.float16))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    no = ("0", "False", "False")
    assert _probe("--help", env=env) == no
    assert _probe("bound", "--delta", "0.01", env=env) == no
    assert _probe("ratio", "--help", env=env) == no
    assert _probe("ratio", str(path), "--raw", "--eps", "1e-5", env=env) == no  # small: numpy
    numba_run = ("ratio", str(path), "--raw", "--eps", "1e-5", "--kernel", "numba")
    assert _probe(*numba_run, env=env) == ("0", "True", "True")  # compiled, cached
    assert _probe(*numba_run, env=env) == ("0", "False", "True")  # from the cache: no numba


LOAD = """
import sys
import numpy as np
from rmsnorm_eps import kernels_compiled as k
x = np.arange(-8, 8, dtype=np.float16).reshape(2, 8)
print(k.SOURCE, k.SAVED, k.float32_sums(x.view(np.uint16), False).tolist(), "numba" in sys.modules)
"""


def _load(env: dict[str, str]) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", LOAD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=True,
    ).stdout.split(maxsplit=2)


@needs_numba
def test_the_cache_directory_is_numba_cache_dir_and_a_bad_file_is_replaced(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    sums = "[204.0, 140.0] "  # (-8..-1)**2 and (0..7)**2
    source, saved, rest = _load(env)
    assert source == "numba" and rest == sums + "True\n"
    assert Path(saved).parent == cache / "rmsnorm_eps" and Path(saved).is_file()
    assert _load(env) == ["cache", "None", sums + "False\n"]
    Path(saved).write_text('{"float16": ["not IR", "f"], "bfloat16": ["x", "y"]}')
    source, again, rest = _load(env)  # unusable: compiled anew and replaced
    assert (source, again, rest) == ("numba", saved, sums + "True\n")
    assert _load(env) == ["cache", "None", sums + "False\n"]


@needs_numba
def test_no_writable_cache_location_compiles_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(blocker / "cache"))  # cannot be created
    sums = "[204.0, 140.0] True\n"
    assert _load(env) == ["numba", "None", sums]
    assert _load(env) == ["numba", "None", sums]  # nothing was written: compiled again
    path = tmp_path / "x.npy"
    _save(path, _report_set("float16"), "float16")
    args = ["ratio", str(path), "--raw", "--eps", "1e-5", "--format", "json"]
    run = [sys.executable, "-m", "rmsnorm_eps", *args]
    got = subprocess.run([*run, "--kernel", "numba"], capture_output=True, text=True, env=env)
    ref = subprocess.run([*run, "--kernel", "numpy"], capture_output=True, text=True, env=env)
    assert got.returncode == ref.returncode == 1
    assert got.stdout == ref.stdout and '"count": 1080' in got.stdout
