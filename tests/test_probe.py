"""Probe sets: categories, determinism, reference outputs, the file format and `probe` CLI."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import ml_dtypes
import mpmath
import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.parity.probe_file import load_probes, probe_bytes, write_probes
from rmsnorm_eps.parity.probe_set import CATEGORIES
from rmsnorm_eps.parity.probes import make_probes


def _ratios(p, name):
    return p.q[p.rows(name)] / p.eps


def test_every_category_is_present_with_its_q_over_eps():
    p = make_probes(64, 1e-6, dtype="float32")
    assert {CATEGORIES[i] for i in p.category.tolist()} == set(CATEGORIES)
    assert np.all(p.inputs[p.rows("zero")] == 0.0)
    assert np.all(_ratios(p, "tiny") < 0.05)
    near = _ratios(p, "near-eps")
    np.testing.assert_allclose(sorted(near), [0.1, 0.3, 1.0, 3.0, 10.0], rtol=1e-6)
    np.testing.assert_allclose(_ratios(p, "at-bound"), 49.2512562814, rtol=1e-6)
    assert np.all(_ratios(p, "ordinary") > 1e5)
    const = p.inputs[p.rows("constant")]
    assert np.all(const == const[:, :1])
    mixed = p.inputs[p.rows("mixed-scale")]
    assert np.all(np.max(np.abs(mixed), axis=1) / np.median(np.abs(mixed), axis=1) > 1e4)


def test_inputs_and_weight_are_exact_in_the_dtype():
    for dtype, np_dtype in [
        ("float16", np.float16),
        ("bfloat16", ml_dtypes.bfloat16),
        ("float32", np.float32),
    ]:
        p = make_probes(32, 1e-5, dtype=dtype, gain="random")
        assert np.array_equal(p.inputs.astype(np_dtype).astype(np.float64), p.inputs)
        assert np.array_equal(p.weight.astype(np_dtype).astype(np.float64), p.weight)


def test_large_rows_overflow_float16_squares_but_not_float32_sums():
    p16 = make_probes(64, 1e-6, dtype="float16")
    big = np.abs(p16.inputs[p16.rows("large")])
    assert np.max(big) ** 2 > 65504  # the square overflows float16
    assert np.max(big) < 65504  # the input itself does not
    p32 = make_probes(64, 1e-6, dtype="float32")
    sums = np.sum(p32.inputs[p32.rows("large")] ** 2, axis=1)
    f32_max = float(np.finfo(np.float32).max)
    assert np.all(sums < f32_max) and np.max(p32.inputs[p32.rows("large")] ** 2) > f32_max / 1e4


def test_reference_matches_mpmath_on_every_row():
    p = make_probes(8, 1e-6, dtype="float64", gain="random", seed=3)
    mpmath.mp.dps = 40
    for i in range(p.count):
        x = [mpmath.mpf(float(v)) for v in p.inputs[i]]
        q = sum(v * v for v in x) / len(x)
        den = mpmath.sqrt(q + mpmath.mpf(p.eps))
        for c in range(p.dim):
            want = float(mpmath.mpf(float(p.gain[c])) * x[c] / den)
            assert math.isclose(p.reference[i, c], want, rel_tol=1e-14, abs_tol=1e-300)


def test_gain_conventions_and_random_gain_extremes():
    pw = make_probes(16, 1e-6, gain="random", seed=1)
    assert np.array_equal(pw.gain, pw.weight)
    assert {30.0, -2.0} <= set(pw.gain.tolist())
    p1 = make_probes(16, 1e-6, gain="random", seed=1, gain_convention="1+w")
    np.testing.assert_allclose(p1.gain, 1.0 + p1.weight)
    assert np.array_equal(make_probes(4, 1e-6, gain=np.array([1, 2, 3, 4.0])).gain, [1, 2, 3, 4])
    gain_rows = pw.inputs[pw.rows("gain-extreme")]
    hot = set(np.argmax(np.abs(gain_rows), axis=1).tolist())
    assert int(np.argmax(pw.gain)) in hot and int(np.argmin(pw.gain)) in hot


def test_same_arguments_give_the_same_bytes_and_the_seed_matters():
    a = probe_bytes(make_probes(32, 1e-6, seed=5))
    assert a == probe_bytes(make_probes(32, 1e-6, seed=5))
    assert a != probe_bytes(make_probes(32, 1e-6, seed=6))


def test_round_trip_through_the_file(tmp_path: Path):
    p = make_probes(16, 2e-6, dtype="bfloat16", gain="random", gain_convention="1+w", seed=2)
    path = tmp_path / "p.npz"
    write_probes(p, path)
    back = load_probes(path)
    for field in ("inputs", "reference", "weight", "gain", "category", "q"):
        assert np.array_equal(getattr(back, field), getattr(p, field)), field
    assert (back.eps, back.dtype, back.seed, back.gain_convention) == (2e-6, "bfloat16", 2, "1+w")
    meta = json.loads(str(np.load(path, allow_pickle=False)["metadata"]))
    assert meta["dim"] == 16 and meta["version"] and meta["gain"] == "random"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 0, "eps": 1e-6}, "dim"),
        ({"dim": 4, "eps": 0.0}, "eps"),
        ({"dim": 4, "eps": 1e-6, "dtype": "int8"}, "dtype"),
        ({"dim": 4, "eps": 1e-6, "gain": "twos"}, "gain"),
        ({"dim": 4, "eps": 1e-6, "gain": np.ones(3)}, "shape"),
        ({"dim": 4, "eps": 1e-6, "gain": np.array([1, 2, np.nan, 1])}, "NaN"),
        ({"dim": 4, "eps": 1e-6, "gain_convention": "2w"}, "convention"),
        ({"dim": 4, "eps": 1e-6, "seed": -1}, "seed"),
        ({"dim": 4, "eps": 1e-6, "delta": 1.5}, "delta"),
    ],
)
def test_bad_parameters_raise(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message):
        make_probes(**kwargs)


def _rewrite(src: Path, dst: Path, **replace: np.ndarray | None) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            key = info.filename[:-4]
            if key in replace:
                if replace[key] is None:
                    continue
                import io

                buf = io.BytesIO()
                np.save(buf, replace[key], allow_pickle=False)
                zout.writestr(info.filename, buf.getvalue())
            else:
                zout.writestr(info, zin.read(info))
    return dst


@pytest.fixture
def probe_file(tmp_path: Path) -> Path:
    path = tmp_path / "probes.npz"
    write_probes(make_probes(8, 1e-6), path)
    return path


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"reference": None}, "reference"),
        ({"inputs": np.zeros((3, 8))}, "inputs"),
        ({"inputs": np.zeros((31, 8), dtype=np.float32)}, "inputs"),
        ({"metadata": np.array("{not json")}, "metadata"),
        ({"metadata": np.array(json.dumps({"format": "other"}))}, "metadata"),
        ({"category": np.full(32, 99, dtype=np.int16)}, "category"),
        ({"q": np.full(32, -1.0)}, "q"),
        ({"weight": np.ones(7)}, "weight"),
    ],
)
def test_damaged_probe_files_name_the_key(probe_file: Path, tmp_path: Path, change, key):
    assert load_probes(probe_file).count == 32  # so 31-row arrays are the wrong size
    bad = _rewrite(probe_file, tmp_path / "bad.npz", **change)
    with pytest.raises(InputFileError) as info:
        load_probes(bad)
    assert info.value.key == key and "bad.npz" in str(info.value)


def test_files_that_are_not_probe_files(tmp_path: Path):
    npy = tmp_path / "a.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(InputFileError, match=r"single \.npy"):
        load_probes(npy)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(InputFileError, match=r"junk\.npz"):
        load_probes(junk)
    with pytest.raises(InputFileError, match="no such file"):
        load_probes(tmp_path / "missing.npz")
    obj = tmp_path / "obj.npz"
    np.savez(obj, metadata=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputFileError, match="metadata"):
        load_probes(obj)


# --------------------------------------------------------------------------- CLI


def test_probe_cli_writes_the_file_and_reports_categories(cli, tmp_path: Path):
    out = tmp_path / "probes.npz"
    res = cli("probe", "--dim", "64", "--eps", "1e-6", "--out", str(out))
    assert res.exit_code == 0, res
    assert "32 probes, d=64, dtype float32, eps 1e-06" in res.stdout
    assert "at-bound          2       49.25       49.25" in res.stdout
    assert "wrote 32 probes" in res.stderr
    assert out.read_bytes() == probe_bytes(make_probes(64, 1e-6))
    again = cli("probe", "--dim", "64", "--eps", "1e-6", "--out", str(out), "--format", "json")
    doc = json.loads(again.stdout)
    assert doc["command"] == "probe" and doc["rows"] == 32 and doc["dtype"] == "float32"
    assert [c["name"] for c in doc["categories"]] == list(CATEGORIES)


def test_probe_cli_reads_a_gain_file(cli, tmp_path: Path):
    w = tmp_path / "w.npy"
    np.save(w, np.linspace(-0.5, 0.5, 8).astype(np.float32))
    out = tmp_path / "p.npz"
    res = cli(
        "probe",
        "--dim",
        "8",
        "--eps",
        "1e-6",
        "--gain",
        str(w),
        "--gain-convention",
        "1+w",
        "--out",
        str(out),
    )
    assert res.exit_code == 0, res
    p = load_probes(out)
    np.testing.assert_allclose(p.gain, 1.0 + np.linspace(-0.5, 0.5, 8), rtol=1e-7)
    assert p.gain_kind == "file:w.npy"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dtype", "int8"], "--dtype"),
        (["--gain-convention", "x"], "--gain-convention"),
        (["--eps", "-1"], "eps must be finite and > 0"),
        (["--gain", "missing.npy"], "missing.npy: no such file"),
        (["--format", "xml"], "--format"),
    ],
)
def test_probe_cli_errors_exit_2(cli, tmp_path: Path, args, message):
    base = {"--dim": "8", "--eps": "1e-6", "--out": str(tmp_path / "p.npz")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    res = cli("probe", *[s for kv in base.items() for s in kv])
    assert res.exit_code == 2
    assert message in res.stderr and "Traceback" not in res.stderr


def test_probe_cli_gain_file_with_the_wrong_shape(cli, tmp_path: Path):
    w = tmp_path / "w.npy"
    np.save(w, np.ones(5))
    res = cli(
        "probe", "--dim", "8", "--eps", "1e-6", "--gain", str(w), "--out", str(tmp_path / "p.npz")
    )
    assert res.exit_code == 2 and "w.npy: gain has shape (5,), expected (8,)" in res.stderr
