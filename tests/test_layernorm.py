"""LayerNorm everywhere: v = mean((x - mean x)^2) in place of q = mean(x^2) (issue 13, item 7).

eps acts on v exactly as on q, so ratio, compare, precision and probe/parity report v/eps for a
LayerNorm: ``--norm layer`` for a plain dump, ``norm: layer`` in a ``--config`` entry. Every
expected figure here is computed independently: exact rationals (``fractions.Fraction``) or
``math.fsum`` in float64, never through the package's kernels.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps import numerics
from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import specs_from_config
from rmsnorm_eps.config import load_config
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.kernels import variance_rows
from rmsnorm_eps.parity.probe_file import load_probes
from rmsnorm_eps.parity.probe_set import CATEGORIES
from rmsnorm_eps.parity.probes import make_probes
from rmsnorm_eps.reports.schema import load_schema

EPS = 1e-5
LN = "model.layers.0.input_layernorm"
RMS = "model.layers.0.post_attention_layernorm"


def _exact_variance(row: np.ndarray) -> float:
    """mean((x - mean x)^2) of the row's float64 values, in exact rational arithmetic."""
    xs = [Fraction(float(t)) for t in row]
    mu = sum(xs, Fraction(0)) / len(xs)
    return float(sum(((t - mu) ** 2 for t in xs), Fraction(0)) / len(xs))


def _fsum_variance(x: np.ndarray) -> np.ndarray:
    """Per row, two passes of math.fsum in float64 (correctly rounded sums)."""
    out = []
    for row in x.reshape(-1, x.shape[-1]).astype(np.float64):
        mu = math.fsum(row) / row.size
        out.append(math.fsum((t - mu) ** 2 for t in row) / row.size)
    return np.array(out).reshape(x.shape[:-1])


def _acts(seed: int = 0, mean: float = 50.0, std: float = 0.01) -> np.ndarray:
    """Activations (4, 16, 64) float32 with a large common mean: q >> v."""
    rng = np.random.default_rng(seed)
    scale = std * np.exp(rng.uniform(-2.0, 2.0, (4, 16, 1)))
    return (mean + rng.standard_normal((4, 16, 64)) * scale).astype(np.float32)


# ----------------------------------------------------------------------------- the kernel
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_variance_rows_is_exact_to_float64_rounding(dtype: str) -> None:
    rng = np.random.default_rng(1)
    x = (
        1000.0
        + rng.standard_normal((6, 48)) * np.array([1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0])[:, None]
    )
    if dtype == "bfloat16":
        f32 = x.astype(np.float32)
        bits = (f32.view(np.uint32) >> 16).astype(np.uint16)
        values = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        got = variance_rows(bits, bf16=True)
    else:
        arr = x.astype(dtype)
        values = arr.astype(np.float64)
        got = variance_rows(arr)
    want = np.array([_exact_variance(r) for r in values])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0.0)
    # the one-pass formula is what the kernel must not be: it cancels at this mean
    if dtype in ("float32", "float64"):  # enough digits below the mean to cancel
        one_pass = np.mean(values * values, axis=1) - np.mean(values, axis=1) ** 2
        assert np.max(np.abs(one_pass - want) / np.maximum(want, 1e-300)) > 1e-6


def test_variance_rows_edge_values() -> None:
    x = np.array(
        [
            [7.5, 7.5, 7.5, 7.5],  # constant: v = 0 exactly
            [0.0, 0.0, 0.0, 0.0],
            [np.nan, 1.0, 2.0, 3.0],
            [np.inf, 1.0, 2.0, 3.0],  # inf - inf: NaN, counted as nonfinite
            [1e300, -1e300, 1e300, -1e300],  # squares overflow: rescaled, v = 1e600 -> inf
            [3e-170, -3e-170, 3e-170, -3e-170],  # squares underflow: rescaled
        ]
    )
    v = variance_rows(x)
    assert v[0] == 0.0 and v[1] == 0.0
    assert math.isnan(v[2]) and math.isnan(v[3])
    assert v[4] == math.inf
    assert v[5] == pytest.approx(9e-340, rel=1e-3) or v[5] == 0.0  # subnormal range
    small = np.array([[3e-160, -3e-160, 3e-160, -3e-160]])
    assert variance_rows(small)[0] == pytest.approx(9e-320, rel=1e-2)
    assert variance_rows(np.full((3, 5), -0.375, np.float32)).tolist() == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- ratio
def _write(tmp_path: Path, arrays: dict[str, np.ndarray], name: str = "acts.npz") -> Path:
    path = tmp_path / name
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def test_ratio_raw_norm_layer_reports_v_over_eps(cli, tmp_path: Path) -> None:
    x = _acts()
    dump = _write(tmp_path, {LN: x})
    res = cli(
        "ratio",
        str(dump),
        "--eps",
        str(EPS),
        "--raw",
        "--norm",
        "layer",
        "-f",
        "json",
        "--top",
        "3",
    )
    assert res.exit_code == 1, res
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    layer = doc["layers"][0]
    assert layer["quantity"] == "v" and layer["raw_dim"] == 64
    v = _fsum_variance(x)
    r = v / EPS
    bound = doc["min_ratio"]
    assert layer["below_bound"] == int(np.count_nonzero(r < bound))
    assert layer["min_q"] == pytest.approx(float(v.min()), rel=1e-12)
    assert layer["max_q"] == pytest.approx(float(v.max()), rel=1e-12)
    assert layer["min_ratio"] == pytest.approx(float(r.min()), rel=1e-12)
    assert layer["min_attenuation"] == pytest.approx(
        math.sqrt(r.min() / (r.min() + 1.0)), rel=1e-12
    )
    worst = layer["worst"][0]
    assert tuple(worst["index"]) == np.unravel_index(int(np.argmin(v)), v.shape)
    # q/eps of the same activations: five orders of magnitude away, no violation at all
    q = np.mean(x.astype(np.float64) ** 2, axis=-1)
    assert q.min() / EPS > 1e8 > 1e3 * r.max()
    res_q = cli("ratio", str(dump), "--eps", str(EPS), "--raw", "-f", "json")
    assert res_q.exit_code == 0
    layer_q = json.loads(res_q.stdout)["layers"][0]
    assert layer_q["quantity"] == "q"
    assert layer_q["min_q"] == pytest.approx(float(q.min()), rel=1e-12)


def test_ratio_text_says_v(cli, tmp_path: Path) -> None:
    dump = _write(tmp_path, {LN: _acts()})
    res = cli(
        "ratio", str(dump), "--eps", str(EPS), "--raw", "--norm", "layer", "--histogram", "all"
    )
    out = " ".join(res.stdout.split())  # rich wraps long lines
    assert "v = mean((x - mean x)^2) over the last axis (LayerNorm variance)" in out
    assert "v/eps >= 49.2512562814" in out and "min v/eps" in out and "r = v/eps" in out
    assert "min q" not in out and "q/eps" not in out
    assert "below v/eps" in res.stderr


def test_ratio_layer_paths_agree(tmp_path: Path) -> None:
    """C order, Fortran order, tiny chunks, threads and bfloat16: one v per row."""
    x = _acts(seed=3)
    c_path = tmp_path / "c.npy"
    f_path = tmp_path / "f.npy"
    np.save(c_path, x)
    np.save(f_path, np.asfortranarray(x))
    want = _fsum_variance(x)
    n = 4 * 16
    reports = [
        analyze_dump(c_path, EPS, raw=True, norm="layer", top_k=n),
        analyze_dump(f_path, EPS, raw=True, norm="layer", top_k=n),
        analyze_dump(c_path, EPS, raw=True, norm="layer", top_k=n, chunk_bytes=700, threads=2),
        analyze_dump(c_path, EPS, raw=True, norm="layer", top_k=n, fast=False),
    ]
    for rep in reports:
        layer = rep.layers[0]
        assert layer.quantity == "v"
        got = {w.index: w.q for w in layer.worst}
        assert len(got) == n
        for idx, value in got.items():
            assert value == pytest.approx(float(want[idx]), rel=1e-12)
    bf = (x.view(np.uint32) >> 16).astype(np.uint16)
    bf_path = tmp_path / "bf.npy"
    np.save(bf_path, bf)
    rep = analyze_dump(bf_path, EPS, raw=True, norm="layer", dtype="bfloat16", top_k=1)
    widened = (bf.astype(np.uint32) << 16).view(np.float32)
    assert rep.layers[0].min_q == pytest.approx(float(_fsum_variance(widened).min()), rel=1e-12)


def test_constant_activations_have_v_zero(tmp_path: Path) -> None:
    x = np.full((3, 32), 2.5, np.float32)
    path = tmp_path / "c.npy"
    np.save(path, x)
    layer = analyze_dump(path, EPS, raw=True, norm="layer").layers[0]
    # v = 0: (x - mean x) is a zero vector, its output b under any eps: counted apart
    assert layer.zero_count == 3 and layer.below_bound == 0 and layer.min_q == 0.0
    assert layer.violations == 0 and layer.min_pos_q is None and layer.safe_eps is None


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "schema_version: 1\n"
        "model: mixed norms\n"
        "defaults: {eps: 1e-5, placement: inside, gain: w, norm: rms}\n"
        "layers:\n"
        '  "*.input_layernorm": {norm: layer}\n'
        '  "*.post_attention_layernorm": {}\n',
        encoding="utf-8",
    )
    return cfg


def test_ratio_config_norm_layer(cli, tmp_path: Path) -> None:
    x = _acts(seed=5)
    dump = _write(tmp_path, {LN: x, RMS: x})
    cfg = _config(tmp_path)
    res = cli("ratio", str(dump), "--config", str(cfg), "--raw", "-f", "json")
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    by_name = {layer["name"]: layer for layer in doc["layers"]}
    assert by_name[LN]["quantity"] == "v" and by_name[RMS]["quantity"] == "q"
    assert by_name[LN]["min_q"] == pytest.approx(float(_fsum_variance(x).min()), rel=1e-12)
    q = np.mean(x.astype(np.float64) ** 2, axis=-1)
    assert by_name[RMS]["min_q"] == pytest.approx(float(q.min()), rel=1e-12)
    # the config's norm wins over --norm; --norm fills layers whose entry has none
    res2 = cli("ratio", str(dump), "--config", str(cfg), "--raw", "--norm", "layer", "-f", "json")
    assert [la["quantity"] for la in json.loads(res2.stdout)["layers"]] == ["v", "q"]
    text = cli("ratio", str(dump), "--config", str(cfg), "--raw").stdout
    assert "min q|v/eps" in text and f"for the LayerNorm layers {LN}" in text


# ----------------------------------------------------------------------------- compare
def test_compare_raw_norm_layer(cli, tmp_path: Path) -> None:
    x = _acts(seed=7)
    dump = _write(tmp_path, {LN: x})
    res = cli(
        "compare", str(dump), "--raw", "--norm", "layer", "--from", "eps=1e-5", "--to", "eps=1e-6",
        "-f", "json",
    )  # fmt: skip
    assert res.exit_code == 1, res
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema("compare")).validate(doc)
    layer = doc["layers"][0]
    assert layer["quantity"] == "v"
    v = _fsum_variance(x)
    factor = np.sqrt((v + 1e-5) / (v + 1e-6))  # y_to / y_from with eps inside the sqrt
    assert layer["max_abs_change"] == pytest.approx(float(np.max(np.abs(factor - 1.0))), rel=1e-10)
    assert layer["moved"] == int(np.count_nonzero(np.abs(factor - 1.0) > 0.01))
    text = cli(
        "compare", str(dump), "--raw", "--norm", "layer", "--from", "eps=1e-5", "--to", "eps=1e-6"
    ).stdout
    assert "v/eps_from" in text and "LayerNorm variance" in text
    # as RMSNorm (q = mean(x^2) ~ 2500) nothing moves
    as_rms = compare_dump(dump, "eps=1e-5", "eps=1e-6", raw=True)
    assert as_rms.layers[0].quantity == "q" and as_rms.layers[0].moved == 0


def test_compare_from_config_accepts_layernorm(tmp_path: Path) -> None:
    x = _acts(seed=9)
    dump = _write(tmp_path, {LN: x, RMS: x})
    cfg = load_config(_config(tmp_path))
    side = specs_from_config(cfg, [LN, RMS])
    assert side.for_layer(LN).eps == 1e-5
    report = compare_dump(dump, "config", "eps=1e-6", raw=True, config=cfg)
    quantities = {layer.name: layer.quantity for layer in report.layers}
    assert quantities == {LN: "v", RMS: "q"}
    moved = {layer.name: layer.moved for layer in report.layers}
    assert moved[LN] > 0 and moved[RMS] == 0


# ----------------------------------------------------------------------------- precision
def test_precision_norm_layer(cli) -> None:
    res = cli("precision", "--eps", "1e-5", "--norm", "layer", "--dtype", "bf16", "-f", "json")
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema("precision")).validate(doc)
    assert doc["quantity"] == "v"
    rms = json.loads(cli("precision", "--eps", "1e-5", "--dtype", "bf16", "-f", "json").stdout)
    assert rms["quantity"] == "q" and rms["dtypes"] == doc["dtypes"]  # the same figures
    text = cli("precision", "--eps", "1e-5", "--norm", "layer", "--dtype", "bf16").stdout
    assert "v + eps == v from v =" in text and "LayerNorm: v = mean((x - mean x)^2)" in text


# ----------------------------------------------------------------------------- probe / parity
def test_layernorm_probes() -> None:
    p = make_probes(64, EPS, norm="layer", bias="random", seed=2)
    assert p.norm == "layer" and p.bias is not None and p.metadata()["norm"] == "layer"
    # q holds v, recomputed independently
    np.testing.assert_allclose(p.q, _fsum_variance(p.inputs), rtol=1e-12, atol=0.0)
    for name in ("tiny", "near-eps", "at-bound"):
        rows = p.rows(name)
        assert rows.size and bool(np.all(p.q[rows] / EPS < 50.0))
        assert bool(np.all(np.abs(np.mean(p.inputs[rows], axis=1)) > np.sqrt(p.q[rows])))
    # v = 0 rows (zero, constant): the reference output is the bias exactly
    for name in ("zero", "constant"):
        for i in p.rows(name):
            assert p.q[i] == 0.0
            assert np.array_equal(p.reference[i], p.bias)
    assert p.rows("constant").size == 3
    want = numerics.layernorm_reference(p.inputs, EPS, p.gain, p.bias)
    assert np.array_equal(p.reference, want)
    # RMSNorm probe sets are unchanged: no norm key, no bias
    rms = make_probes(64, EPS)
    assert "norm" not in rms.metadata() and rms.bias is None
    with pytest.raises(InvalidParameterError, match="dim >= 2"):
        make_probes(1, EPS, norm="layer")


def _torch_layernorm_outputs(probes_path: Path, eps: float, out: Path) -> None:
    torch = pytest.importorskip("torch")
    p = load_probes(probes_path)
    assert p.bias is not None
    module = torch.nn.LayerNorm(p.dim, eps=eps)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(p.weight))
        module.bias.copy_(torch.from_numpy(p.bias))
        y = module(torch.from_numpy(p.inputs).to(torch.float32))
    np.save(out, y.numpy())


def test_probe_parity_round_trip_with_torch_layernorm(cli, tmp_path: Path) -> None:
    probes = tmp_path / "ln.npz"
    res = cli(
        "probe", "--dim", "64", "--eps", "1e-5", "--norm", "layer", "--bias", "random",
        "--gain", "random", "--save-data", str(probes),
    )  # fmt: skip
    assert res.exit_code == 0, res
    assert "LayerNorm (bias random" in res.stdout and "min v/eps" in res.stdout
    good, bad = tmp_path / "good.npy", tmp_path / "bad.npy"
    _torch_layernorm_outputs(probes, 1e-5, good)
    _torch_layernorm_outputs(probes, 1e-6, bad)
    record = tmp_path / "record.md"
    ok = cli("parity", "--probes", str(probes), "--actual", str(good), "--norm", "layer",
             "--record", str(record), "-f", "json")  # fmt: skip
    assert ok.exit_code == 0, ok
    doc = json.loads(ok.stdout)
    jsonschema.Draft202012Validator(load_schema("parity")).validate(doc)
    assert doc["norm"] == "layer" and doc["verdict"] == "pass"
    assert doc["reference"].startswith("rmsnorm_eps.numerics.layernorm_reference")
    assert doc["inference"]["eps"] == pytest.approx(1e-5, rel=0.05)
    assert doc["inference"]["placement"] == "inside"
    assert doc["inference"]["gain"]["finding"] == "match"
    text = record.read_text(encoding="utf-8")
    assert text.startswith("# LayerNorm parity record: PASS")
    assert "| norm | LayerNorm (layer) |" in text
    fail = cli("parity", "--probes", str(probes), "--actual", str(bad), "-f", "json")
    assert fail.exit_code == 1
    fdoc = json.loads(fail.stdout)
    assert fdoc["verdict"] == "fail" and fdoc["norm"] == "layer"
    assert {"tiny", "near-eps"} <= set(fdoc["summary"]["failing_categories"])
    assert fdoc["inference"]["eps"] == pytest.approx(1e-6, rel=0.05)
    assert "0.1x configured" in fdoc["diagnosis"]
    # --norm must match the probe file
    wrong = cli("parity", "--probes", str(probes), "--actual", str(good), "--norm", "rms")
    assert wrong.exit_code == 2 and "was made for norm layer" in wrong.stderr


def test_torch_adapter_layernorm_and_one_pass_variance() -> None:
    torch = pytest.importorskip("torch")
    from rmsnorm_eps.parity.api import check_parity
    from rmsnorm_eps.parity.torch_adapter import check_parity_torch

    ok = check_parity_torch(torch.nn.LayerNorm(32, eps=1e-5), eps=1e-5, norm="layer")
    assert ok.passed, ok.diagnosis
    # constant rows (v = 0): torch returns the bias (0) exactly, as the reference does
    const = next(c for c in ok.categories if c.name == "constant")
    assert const.max_abs_error == 0.0
    off = check_parity_torch(torch.nn.LayerNorm(32, eps=1e-4), eps=1e-5, norm="layer")
    assert not off.passed and off.inference.eps == pytest.approx(1e-4, rel=0.05)
    assert "10x configured" in off.diagnosis and "variance cancels" not in off.diagnosis

    def one_pass(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = x.mean(axis=1, keepdims=True, dtype=np.float32)
        v = np.maximum((x * x).mean(axis=1, keepdims=True, dtype=np.float32) - mu * mu, 0)
        return ((x - mu) / np.sqrt(v + np.float32(1e-5)) * w + b).astype(np.float32)

    bad = check_parity(one_pass, dim=32, eps=1e-5, norm="layer", bias="random", with_weight=True)
    assert "mixed-scale" in bad.failing_categories
    assert "remove the mean before squaring" in bad.diagnosis


def test_layernorm_probe_file_round_trip(tmp_path: Path) -> None:
    from rmsnorm_eps.parity.probe_file import write_probes

    p = make_probes(16, 1e-6, norm="layer", bias=np.linspace(-1, 1, 16), dtype="bfloat16")
    path = tmp_path / "p.npz"
    write_probes(p, path)
    back = load_probes(path)
    assert back.norm == "layer" and back.bias_kind == "given"
    assert back.bias is not None and np.array_equal(back.bias, p.bias)
    assert np.array_equal(back.reference, p.reference) and np.array_equal(back.q, p.q)
    assert CATEGORIES[int(back.category[0])] == "zero"


def test_hostile_layer_name_in_the_mixed_header(cli, tmp_path: Path) -> None:
    evil = "evil\x1b[2J\u202e.input_layernorm"
    x = _acts(seed=11)
    dump = _write(tmp_path, {evil: x, RMS: x})
    cfg = _config(tmp_path)
    for fmt in ("text", "markdown", "github", "sarif", "junit"):
        res = cli("ratio", str(dump), "--config", str(cfg), "--raw", "-f", fmt)
        assert res.exit_code == 1, res
        assert "\x1b" not in res.stdout and "\u202e" not in res.stdout
    doc = json.loads(cli("ratio", str(dump), "--config", str(cfg), "--raw", "-f", "json").stdout)
    assert {la["name"]: la["quantity"] for la in doc["layers"]} == {evil: "v", RMS: "q"}


def test_unknown_norm_is_refused(tmp_path: Path) -> None:
    from rmsnorm_eps.compare.precision import precision_report

    path = tmp_path / "x.npy"
    np.save(path, np.ones((2, 4), np.float32))
    with pytest.raises(InvalidParameterError, match="norm must be one of"):
        analyze_dump(path, EPS, raw=True, norm="batch")
    with pytest.raises(InvalidParameterError, match="norm must be one of"):
        compare_dump(path, "eps=1e-5", "eps=1e-6", raw=True, norm="batch")
    with pytest.raises(InvalidParameterError, match="norm must be 'rms' or 'layer'"):
        precision_report(1e-5, norm="batch")
    with pytest.raises(InvalidParameterError, match="norm must be 'rms' or 'layer'"):
        make_probes(8, EPS, norm="batch")
