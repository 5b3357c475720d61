"""precision: rounding to float16/bfloat16/float32, eps as stored, absorption, q range."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from rmsnorm_eps.compare.precision import absorption_thresholds, precision_report, precision_row
from rmsnorm_eps.dtypes import (
    FORMATS,
    bfloat16_from_float32_bits,
    bfloat16_ml_dtypes,
    round_to,
)

ml_dtypes = pytest.importorskip("ml_dtypes")


def _random_float64(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.ldexp(rng.uniform(-2, 2, n), rng.integers(-160, 140, n))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("name", ["float16", "float32"])
def test_round_to_matches_numpy(name: str) -> None:
    x = _random_float64(100_000, 1)
    with np.errstate(over="ignore"):
        ref = x.astype(name).astype(np.float64)
    assert _same(round_to(x, name), ref)


def test_round_to_bfloat16_matches_bits_and_ml_dtypes_on_float32() -> None:
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    x32 = bits.view(np.float32)
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            3.3895313892515355e38,
            3.3961e38,
            1.0 + 2**-8,
            1.0 + 3 * 2**-8,
            2**-133,
        ],
        np.float32,
    )
    x32 = np.concatenate([x32, special])
    with np.errstate(invalid="ignore"):  # signalling NaN bit patterns
        x64 = x32.astype(np.float64)
    by_bits = bfloat16_from_float32_bits(x32)
    by_ml = bfloat16_ml_dtypes(x64)
    ours = round_to(x64, "bfloat16")
    assert _same(by_bits, by_ml)
    assert _same(ours, by_ml)
    # ties to even: 1 + 2**-8 is halfway between 1 and 1 + 2**-7 -> 1
    assert by_bits[-3] == 1.0 and by_bits[-2] == 1.0 + 2**-6


def test_bfloat16_ml_dtypes_double_rounds_float64_before_0_7() -> None:
    # ml_dtypes < 0.7 goes float64 -> float32 -> bfloat16 (double rounding); 0.7 rounds once.
    # round_to rounds once, correctly, whatever ml_dtypes does.
    from importlib.metadata import version

    x = np.array([1.0 + 2**-8 + 2**-40])  # just above a bf16 tie: correctly rounds up
    assert float(round_to(x, "bfloat16")[0]) == 1.0 + 2**-7
    major, minor = (int(p) for p in version("ml_dtypes").split(".")[:2])
    double_rounds = (major, minor) < (0, 7)
    # the float32 step lands on the tie, which rounds to even (1.0)
    assert float(bfloat16_ml_dtypes(x)[0]) == (1.0 if double_rounds else 1.0 + 2**-7)


def test_eps_as_stored() -> None:
    rows = {r.dtype: r for r in precision_report(1e-6).rows}
    assert rows["float16"].stored == float(np.float16(1e-6)) == pytest.approx(1.0133e-06, abs=5e-11)
    assert rows["bfloat16"].stored == pytest.approx(9.984e-07, abs=5e-11)
    assert rows["bfloat16"].stored == float(np.asarray(1e-6).astype(ml_dtypes.bfloat16))
    assert rows["float32"].stored == float(np.float32(1e-6))
    assert f"{rows['float32'].stored:.9g}" == "9.99999997e-07"
    assert rows["float16"].subnormal and not rows["bfloat16"].subnormal


def test_eps_vanishes_in_float16() -> None:
    row = precision_row(1e-8, "float16")
    assert row.stored == 0.0 and row.rounds_to_zero and row.vanishes
    assert float(np.float16(1e-8)) == 0.0


def test_range_limits() -> None:
    row = precision_row(1e-6, "float16")
    assert row.square_finite_max == 255.875 and row.square_overflow_from == 256.0
    assert np.isfinite(np.float16(255.875) * np.float16(255.875))
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(256.0) * np.float16(256.0))
    assert row.max == 65504.0
    assert row.q_flush_to_zero_at_or_below == 2.0**-25
    assert float(np.float16(2.0**-25)) == 0.0 and float(np.float16(2.0**-25 * 1.0001)) > 0
    assert precision_row(1e6, "float16").overflows


def _adds_to_itself(dtype: str) -> Callable[[np.ndarray, float], np.ndarray]:
    if dtype == "bfloat16":
        bf = ml_dtypes.bfloat16
        return lambda q, e: (q.astype(bf) + np.asarray(e).astype(bf)).astype(np.float64) == q
    return lambda q, e: (q.astype(dtype) + np.asarray(e, dtype)).astype(np.float64) == q


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 2.0**-20, 3e-3, 1e-8])
def test_absorption_threshold_exhaustive(dtype: str, eps: float) -> None:
    """Every positive finite value of the dtype: q + eps == q exactly as the thresholds say."""
    f = FORMATS[dtype]
    nbits = 16
    bits = np.arange(1, 2 ** (nbits - 1), dtype=np.uint16)
    if dtype == "float16":
        q = bits.view(np.float16).astype(np.float64)
    else:
        with np.errstate(invalid="ignore"):  # NaN bit patterns, dropped below
            q = bits.view(ml_dtypes.bfloat16).astype(np.float64)
    q = q[np.isfinite(q)]
    row = precision_row(eps, dtype)
    e = row.stored
    absorbed = _adds_to_itself(dtype)(q, e)
    first, always = absorption_thresholds(e, f)
    assert (first, always) == (row.absorbed_from, row.always_absorbed_from)
    if e == 0.0:
        assert absorbed.all()
        return
    assert first is not None and always is not None
    assert q[absorbed].min() == first
    assert absorbed[q >= always].all()
    assert not absorbed[q < always][-1]
    assert row.verified


def test_absorption_float32_and_power_of_two_tie() -> None:
    row = precision_row(1e-5, "float32")
    assert row.absorbed_from == row.always_absorbed_from == 256.0
    e = np.float32(1e-5)
    assert np.float32(256.0) + e == np.float32(256.0)
    assert np.nextafter(np.float32(256.0), np.float32(0)) + e != np.nextafter(
        np.float32(256.0), np.float32(0)
    )
    tie = precision_row(2.0**-20, "float32")  # eps a power of two: ties absorb even q first
    assert (tie.absorbed_from, tie.always_absorbed_from) == (16.0, 32.0)
    assert np.float32(16.0) + np.float32(2.0**-20) == np.float32(16.0)
    odd = np.nextafter(np.float32(16.0), np.float32(32))
    assert odd + np.float32(2.0**-20) != odd


# ----------------------------------------------------------------- CLI


def test_cli_precision_float16_vanishes(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("precision", "--eps", "1e-8", "--dtype", "float16")
    assert r.exit_code == 1
    assert "ROUNDS TO ZERO" in r.stdout and "eps rounds to 0" in r.stdout
    assert "FAIL: eps 1e-08 vanishes (rounds to 0 or inf) in float16" in r.stderr
    assert cli("precision", "--eps", "1e-8", "--dtype", "float16", "--exit-zero").exit_code == 0


def test_cli_precision_default_dtypes(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("precision", "--eps", "1e-6")
    assert r.exit_code == 0
    for text in (
        "1.01327896e-06",
        "9.983778e-07",
        "9.99999997e-07",
        "0.00390625",
        "255.875",
        "q/eps < 489.075",
    ):
        assert text in r.stdout


def test_cli_precision_json(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("precision", "--eps", "1e-6", "--dtype", "bfloat16", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["command"] == "precision" and doc["schema_version"] == 1
    (row,) = doc["dtypes"]
    assert row["stored"] == 9.98377799987793e-07 and row["absorbed_from"] == 2.0**-11
    assert row["verified"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--eps", "0"), "eps must be finite and > 0"),
        (("--eps", "1e-6", "--dtype", "int8"), "'int8' is not one of"),
        (("--eps", "1e-6", "--format", "xml"), "'xml' is not one of"),
    ],
)
def test_cli_precision_errors(cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("precision", *args)
    assert r.exit_code == 2 and message in r.stderr
