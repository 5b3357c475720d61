"""Parity: rules, inference, diagnosis, records and the `parity` CLI, on numpy implementations."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.parity import check_parity, compare_outputs, make_probes, write_probes
from rmsnorm_eps.parity.record import render_record
from rmsnorm_eps.parity.rules import compare, resolve_tolerance

SMALL = {"tiny", "near-eps", "at-bound"}


def rmsnorm_impl(
    eps: float,
    placement: str = "inside",
    out_dtype: type = np.float64,
    gain_as: str | None = None,
) -> Callable[..., np.ndarray]:
    """An independent numpy RMSNorm: float64, scaled by max|x| (no overflow), cast at the end."""

    def fn(x: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        x64 = x.astype(np.float64)
        m = np.max(np.abs(x64), axis=-1, keepdims=True)
        m = np.where(m > 0, m, 1.0)
        rms = m * np.sqrt(np.mean((x64 / m) ** 2, axis=-1, keepdims=True))
        if placement == "inside":
            y = x64 / np.hypot(rms, np.sqrt(eps))
        elif placement == "outside":
            y = x64 / (rms + eps)
        else:  # clamp
            y = x64 / np.maximum(rms, eps)
        if gain_as == "w":
            y = y * w.astype(np.float64)
        elif gain_as == "1+w":
            y = y * (1.0 + w.astype(np.float64))
        return y.astype(out_dtype)

    return fn


def squares_in_float16(eps: float) -> Callable[[np.ndarray], np.ndarray]:
    """A float16 implementation that forms x**2 in float16 (overflows above |x| = 256)."""

    def fn(x: np.ndarray) -> np.ndarray:
        x16 = x.astype(np.float16)
        with np.errstate(over="ignore"):
            sq = x16 * x16
        q = np.mean(sq.astype(np.float32), axis=-1, keepdims=True)
        return (x16.astype(np.float32) / np.sqrt(q + np.float32(eps))).astype(np.float16)

    return fn


# --------------------------------------------------------------------------- the Tests list


def test_correct_float64_implementation_passes_every_category():
    r = check_parity(
        rmsnorm_impl(1e-6), dim=64, eps=1e-6, dtype="float64", gain="random", with_weight=False
    )  # gain random: the impl must apply it
    assert not r.passed  # sanity: without the gain it fails...
    r = check_parity(
        rmsnorm_impl(1e-6, gain_as="w"),
        dim=64,
        eps=1e-6,
        dtype="float64",
        gain="random",
        with_weight=True,
    )
    assert r.passed, r.diagnosis
    assert len(r.categories) == 9 and all(c.failing == 0 for c in r.categories)
    assert r.inference.placement == "inside" and r.inference.gain.kind == "match"
    assert r.inference.eps == pytest.approx(1e-6, rel=1e-9)
    assert r.diagnosis.startswith("PASS: all 9 categories")


def test_eps_1e5_for_1e6_fails_only_small_categories_and_is_inferred():
    r = check_parity(rmsnorm_impl(1e-5, out_dtype=np.float16), dim=64, eps=1e-6, dtype="float16")
    assert set(r.failing_categories) == SMALL
    assert r.inference.eps == pytest.approx(1e-5, rel=0.01)
    assert r.inference.placement == "inside"
    assert r.inference.eps_matches is False
    assert "small inputs fail" in r.diagnosis and "10x configured" in r.diagnosis


def test_eps_1e5_for_1e6_at_float32_tolerances_also_moves_ordinary_inputs():
    # (eps' - eps) / (2 q) = 4.5e-6 at q = 1 is above float32's rtol 1.3e-6: reported, not hidden
    r = check_parity(rmsnorm_impl(1e-5, out_dtype=np.float32), dim=64, eps=1e-6, dtype="float32")
    assert set(r.failing_categories) >= SMALL
    assert "ordinary" in r.failing_categories and "large" not in r.failing_categories
    assert r.inference.eps == pytest.approx(1e-5, rel=1e-4)


@pytest.mark.parametrize("placement", ["outside", "clamp"])
def test_placement_is_identified(placement):
    r = check_parity(rmsnorm_impl(1e-6, placement), dim=64, eps=1e-6, dtype="float64")
    assert r.inference.placement == placement
    assert r.inference.eps == pytest.approx(1e-6, rel=1e-6)
    assert set(r.failing_categories) >= SMALL
    expected = "outside the square root" if placement == "outside" else "in a clamp"
    assert f"placement {placement}" in r.diagnosis and expected in r.diagnosis
    fits = {f.placement: f.chi2_per_row for f in r.inference.fits}
    assert fits[placement] < 1 and min(v for k, v in fits.items() if k != placement) > 1e6


def test_placement_in_float32_outputs():
    r = check_parity(rmsnorm_impl(1e-6, "outside", np.float32), dim=64, eps=1e-6)
    assert r.inference.placement == "outside"
    assert r.inference.eps == pytest.approx(1e-6, rel=1e-3)


@pytest.mark.parametrize("gain", ["random", "ones"])
def test_one_plus_w_where_w_was_meant(gain):
    r = check_parity(
        rmsnorm_impl(1e-6, gain_as="1+w", out_dtype=np.float32),
        dim=64,
        eps=1e-6,
        gain=gain,
        with_weight=True,
    )
    assert not r.passed
    assert r.inference.gain.kind == "1+w"
    assert "gain convention: 1 + w applied where w was meant" in r.diagnosis
    if gain == "ones":
        assert r.inference.gain.factor == pytest.approx(2.0)
        assert "median channel factor 2" in r.diagnosis
    assert r.inference.eps == pytest.approx(1e-6, rel=1e-3)  # the eps fit is not fooled


def test_w_where_one_plus_w_was_meant():
    r = check_parity(
        rmsnorm_impl(1e-6, gain_as="w", out_dtype=np.float32),
        dim=64,
        eps=1e-6,
        gain="random",
        gain_convention="1+w",
        with_weight=True,
    )
    assert r.inference.gain.kind == "w"
    assert "w applied where 1 + w was meant" in r.diagnosis
    ok = check_parity(
        rmsnorm_impl(1e-6, gain_as="1+w", out_dtype=np.float32),
        dim=64,
        eps=1e-6,
        gain="random",
        gain_convention="1+w",
        with_weight=True,
    )
    assert ok.passed, ok.diagnosis


def test_uniform_factor_and_particular_channels():
    def scaled(x):
        return 1.5 * rmsnorm_impl(1e-6)(x)

    r = check_parity(scaled, dim=32, eps=1e-6, dtype="float64")
    assert r.inference.gain.kind == "uniform" and "uniform factor 1.5" in r.diagnosis

    def broken_channel(x):
        y = rmsnorm_impl(1e-6)(x)
        y[:, 7] *= 0.5
        return y

    r = check_parity(broken_channel, dim=32, eps=1e-6, dtype="float64")
    assert r.inference.gain.kind == "per-channel" and r.inference.gain.channels[0] == 7
    assert "particular channels differ (7" in r.diagnosis


def test_float16_squares_fail_large_and_are_diagnosed_as_overflow():
    r = check_parity(squares_in_float16(1e-6), dim=64, eps=1e-6, dtype="float16")
    assert "large" in r.failing_categories
    assert {"ordinary", "constant", "mixed-scale", "zero"}.isdisjoint(r.failing_categories)
    large = next(c for c in r.categories if c.name == "large")
    # |x| ~ 512 and 2048 rows: x*x = inf in float16, so the output is x / sqrt(inf) = 0; the
    # |x| ~ 128 row's squares (<= 16384) still fit and pass
    assert large.failing_rows == 2 and large.max_rel_error == 1.0
    assert "overflow in intermediates" in r.diagnosis
    ok = check_parity(rmsnorm_impl(1e-6, out_dtype=np.float16), dim=64, eps=1e-6, dtype="float16")
    assert ok.passed, ok.diagnosis


def test_eps_added_to_the_sum_of_squares_is_named():
    def sum_eps(x):
        x64 = x.astype(np.float64)
        return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6 / 64)

    r = check_parity(sum_eps, dim=64, eps=1e-6, dtype="float32")
    assert r.inference.eps == pytest.approx(1e-6 / 64, rel=1e-4)
    assert "eps/d (d=64)" in r.diagnosis


def test_no_eps_at_all_is_reported_as_not_inferred():
    def no_eps(x):
        x64 = x.astype(np.float64)
        with np.errstate(invalid="ignore"):
            return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True))

    r = check_parity(no_eps, dim=16, eps=1e-6, dtype="float64")
    assert r.inference.eps is None and r.inference.placement == "undetermined"
    assert "no small probe shows attenuation" in r.inference.note
    assert r.diagnosis.startswith("FAIL: 16 nonfinite output(s)")  # the zero row: 0/0
    assert "eps not inferred" in r.diagnosis


# --------------------------------------------------------------------------- rules


def _one(reference, actual, rule="torch", atol=None, rtol=None, dtype="float32"):
    ref = np.asarray(reference, dtype=np.float64)[None, :]
    act = np.asarray(actual, dtype=np.float64)[None, :]
    tol = resolve_tolerance(rule, dtype, atol, rtol)
    return compare(ref, act, tol, np.zeros(1, dtype=np.int16), ("c",))[0]


def test_torch_rule_boundary_and_minimum_tolerances():
    # powers of two, so every quantity is exact: atol + rtol*|r| = 2**-14 + 2**-16 * 4 = 2**-13
    atol, rtol = 2.0**-14, 2.0**-16
    assert _one([4.0], [4.0 + 2.0**-13], atol=atol, rtol=rtol).passed  # the tie passes
    c = _one([4.0], [4.0 + 2.0**-12], atol=atol, rtol=rtol)
    assert not c.passed
    assert c.min_atol == 2.0**-12 - 2.0**-14
    assert c.min_rtol == (2.0**-12 - 2.0**-14) / 4.0
    assert (c.max_abs_error, c.max_rel_error) == (2.0**-12, 2.0**-14)
    assert _one([4.0], [4.0 + 2.0**-12], atol=c.min_atol, rtol=rtol).passed
    assert _one([4.0], [4.0 + 2.0**-12], atol=atol, rtol=c.min_rtol).passed


def test_torch_defaults_per_dtype():
    f16, f64 = resolve_tolerance("torch", "float16"), resolve_tolerance("torch", "float64")
    assert (f16.rtol, f16.atol, f64.rtol, f64.atol) == (1e-3, 1e-5, 1e-7, 1e-7)
    assert resolve_tolerance("torch", "bfloat16").rtol == 1.6e-2
    assert (
        resolve_tolerance("torch", "float64").rtol,
        resolve_tolerance("torch", "float64").atol,
    ) == (1e-7, 1e-7)
    t = resolve_tolerance("torch", "float32", atol=0.5)
    assert (t.atol, t.rtol) == (0.5, 1.3e-6) and "given atol" in t.source
    with pytest.raises(InvalidParameterError):
        resolve_tolerance("torch", "float32", atol=-1)
    with pytest.raises(InvalidParameterError):
        resolve_tolerance("numpy", "float32")


def test_polygraphy_rule_needs_both_thresholds_exceeded():
    # abs 5e-3 > atol 1e-5 but rel 5e-6 <= rtol 1e-5: passes polygraphy, fails torch float32
    assert _one([1000.0], [1000.005], rule="polygraphy").passed
    assert not _one([1000.0], [1000.005], rule="torch").passed
    # near zero: abs 5e-6 <= atol passes polygraphy although rel is infinite
    c = _one([0.0], [5e-6], rule="polygraphy")
    assert c.passed and c.max_rel_error == float("inf")
    c = _one([1.0, 0.0], [1.1, 0.0], rule="polygraphy")
    assert not c.passed and c.min_atol == pytest.approx(0.1) and c.min_rtol == pytest.approx(0.1)


def test_nonfinite_values_are_checked_separately():
    c = _one([1.0, 2.0, 3.0], [np.nan, np.inf, 3.0], atol=1e9, rtol=1e9)
    assert c.failing == 2 and c.nan == 1 and c.inf == 1
    assert c.min_atol == float("inf") and c.min_rtol == float("inf")
    assert c.max_abs_error == 0.0  # errors are over the finite elements
    same = _one([np.inf, 1.0], [np.inf, 1.0])
    assert same.passed and same.inf == 1
    assert not _one([np.inf], [-np.inf]).passed


def test_nan_outputs_fail_the_verdict():
    def nan_on_zero(x):
        x64 = x.astype(np.float64)
        return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True))  # 0/0 on the zero row

    with np.errstate(invalid="ignore", over="ignore"):
        r = check_parity(nan_on_zero, dim=16, eps=1e-6)
    zero = next(c for c in r.categories if c.name == "zero")
    assert zero.nan == 16 and not zero.passed and r.nonfinite >= 16
    assert "nonfinite output(s)" in r.diagnosis


def test_output_shape_is_checked():
    with pytest.raises(InvalidParameterError, match=r"fn returned shape \(32, 3\)"):
        check_parity(lambda x: x[:, :3], dim=8, eps=1e-6)
    with pytest.raises(InvalidParameterError, match="int64"):
        check_parity(lambda x: x.astype(np.int64), dim=8, eps=1e-6)
    p = make_probes(8, 1e-6)
    with pytest.raises(InputFileError, match=r"out\.npy: outputs have shape \(3, 8\)"):
        compare_outputs(p, p.reference[:3], output_dtype="float64", actual_source="out.npy")
    flat = compare_outputs(p, p.reference.reshape(1, -1, 8), output_dtype="float64")
    assert flat.passed


# --------------------------------------------------------------------------- records


def _fail_result():
    return check_parity(rmsnorm_impl(1e-5, out_dtype=np.float32), dim=16, eps=1e-6)


@pytest.mark.parametrize("fmt", ["yaml", "json", "md"])
def test_records_are_byte_identical_across_runs(fmt):
    assert render_record(_fail_result(), fmt) == render_record(_fail_result(), fmt)


def test_record_contents():
    r = _fail_result()
    doc = yaml.safe_load(render_record(r, "yaml"))
    assert doc["verdict"] == "fail" and doc["dimension"] == 16
    assert doc["normalization_axis"] == "last (-1)"
    assert doc["input_dtype"] == "float32" and doc["gain_dtype"] == "float32"
    assert doc["configured_eps"] == 1e-6 and doc["inferred_eps"] == pytest.approx(1e-5, rel=1e-4)
    assert doc["placement"] == "inside"
    assert doc["error_rule"]["rule"] == "torch" and doc["error_rule"]["rtol"] == 1.3e-6
    assert "rmsnorm_reference" in doc["reference"]
    assert [c["name"] for c in doc["categories"]][:3] == ["zero", "tiny", "near-eps"]
    assert "generated_at" not in doc
    assert json.loads(render_record(r, "json")) == doc
    md = render_record(r, "md")
    assert md.startswith("# RMSNorm parity record: FAIL")
    assert "| tiny |" in md and "| configured eps | 1e-06 |" in md
    stamped = yaml.safe_load(render_record(r, "yaml", "2026-01-01T00:00:00Z"))
    assert stamped["generated_at"] == "2026-01-01T00:00:00Z"


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def probes16(tmp_path: Path) -> Path:
    path = tmp_path / "probes.npz"
    write_probes(make_probes(16, 1e-6, dtype="float32"), path)
    return path


def _outputs(probes: Path, fn) -> np.ndarray:
    x = np.load(probes, allow_pickle=False)["inputs"].astype(np.float32)
    return fn(x)


def test_parity_cli_pass_and_fail_paths(cli, tmp_path: Path, probes16: Path):
    good = tmp_path / "good.npy"
    np.save(good, _outputs(probes16, rmsnorm_impl(1e-6, out_dtype=np.float32)))
    res = cli("parity", "--probes", str(probes16), "--actual", str(good))
    assert res.exit_code == 0, res
    assert "PASS: all 9 categories" in res.stderr and "pass" in res.stdout
    bad = tmp_path / "bad.npz"
    np.savez(
        bad, outputs=_outputs(probes16, rmsnorm_impl(1e-5, out_dtype=np.float32)), other=np.zeros(3)
    )
    res = cli("parity", "--probes", str(probes16), "--actual", str(bad))
    assert res.exit_code == 1
    assert "FAIL" in res.stdout and "inferred eps 1e-05" in res.stdout
    assert (
        cli("parity", "--probes", str(probes16), "--actual", str(bad), "--exit-zero").exit_code == 0
    )
    res = cli(
        "parity",
        "--probes",
        str(probes16),
        "--actual",
        str(bad),
        "--format",
        "json",
        "--rule",
        "polygraphy",
        "--atol",
        "1",
        "--rtol",
        "1",
    )
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["verdict"] == "pass"
    assert doc["error_rule"] == {
        "rule": "polygraphy",
        "formula": "fail only if |a - r| > atol and |a - r| / |r| > rtol",
        "atol": 1.0,
        "rtol": 1.0,
        "thresholds_from": "given",
        "nonfinite": "checked separately: NaN always fails; inf passes only against the same inf",
    }
    assert doc["implementation"]["source"].endswith("bad.npz [outputs]")


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".md"])
def test_parity_cli_records_are_deterministic(cli, tmp_path: Path, probes16: Path, suffix):
    out = tmp_path / "out.npy"
    np.save(out, _outputs(probes16, rmsnorm_impl(1e-5, out_dtype=np.float32)))
    rec1, rec2 = tmp_path / f"r1{suffix}", tmp_path / f"r2{suffix}"
    assert cli("parity", "-p", str(probes16), "-a", str(out), "--record", str(rec1)).exit_code == 1
    assert cli("parity", "-p", str(probes16), "-a", str(out), "--record", str(rec2)).exit_code == 1
    assert rec1.read_bytes() == rec2.read_bytes() and rec1.stat().st_size > 500
    stamped = tmp_path / f"r3{suffix}"
    cli("parity", "-p", str(probes16), "-a", str(out), "--record", str(stamped), "--record-time")
    assert stamped.read_bytes() != rec1.read_bytes()


def test_parity_cli_bad_input_exits_2(cli, tmp_path: Path, probes16: Path):
    def run(*args: str):
        return cli("parity", "--probes", str(probes16), *args)

    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((3, 16), np.float32))
    res = run("--actual", str(wrong))
    assert res.exit_code == 2 and "wrong.npy: outputs have shape (3, 16)" in res.stderr
    ints = tmp_path / "ints.npy"
    np.save(ints, np.zeros((5, 16), np.int32))
    res = run("--actual", str(ints))
    assert res.exit_code == 2 and "ints.npy" in res.stderr and "unsupported dtype" in res.stderr
    two = tmp_path / "two.npz"
    np.savez(two, a=np.zeros(2), b=np.zeros(2))
    res = run("--actual", str(two))
    assert res.exit_code == 2 and "choose one with --key" in res.stderr
    res = run("--actual", str(two), "--key", "c")
    assert res.exit_code == 2 and "two.npz [c]: no array named 'c'" in res.stderr
    res = run("--actual", str(tmp_path / "nope.npy"))
    assert res.exit_code == 2 and "nope.npy: no such file" in res.stderr
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00" * 4)
    res = run("--actual", str(junk))
    assert res.exit_code == 2 and "junk.bin: not a .npy, .npz or .safetensors" in res.stderr
    res = run("--actual", str(wrong), "--rule", "numpy")
    assert res.exit_code == 2 and "--rule" in res.stderr
    res = run("--actual", str(wrong), "--record", str(tmp_path / "r.txt"))
    assert res.exit_code == 2 and "must end in .yaml" in res.stderr
    res = run("--actual", str(wrong), "--atol", "-1")
    assert res.exit_code == 2
    res = cli("parity", "--probes", str(wrong), "--actual", str(wrong))
    assert res.exit_code == 2 and "wrong.npy" in res.stderr and "probe" in res.stderr
    for res in (run("--actual", str(wrong)), run("--actual", str(ints))):
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
