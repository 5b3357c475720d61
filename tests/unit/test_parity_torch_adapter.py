"""Parity of torch modules (extra [torch]; CI installs torch 2.13.0 CPU) and safetensors outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.parity import make_probes, write_probes
from rmsnorm_eps.parity.actual import read_actual
from rmsnorm_eps.parity.diagnose import FLOAT32_EPS

torch = pytest.importorskip("torch")
from rmsnorm_eps.parity.torch_adapter import check_parity_torch, run_torch  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_rmsnorm_eps_none_is_flagged_and_its_eps_inferred(dtype):
    module = torch.nn.RMSNorm(64, eps=None).to(getattr(torch, dtype))
    r = check_parity_torch(module, eps=1e-6, dtype=dtype)
    assert not r.passed
    assert {"tiny", "near-eps"} <= set(r.failing_categories)
    assert r.output_dtype == dtype
    assert r.inference.eps == pytest.approx(1.1920929e-07, rel=0.05)
    assert r.inference.placement == "inside" and r.inference.eps_matches is False
    assert "float32 machine epsilon" in r.diagnosis and "eps=None" in r.diagnosis


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_rmsnorm_with_the_configured_eps_passes(dtype):
    module = torch.nn.RMSNorm(64, eps=1e-6).to(getattr(torch, dtype))
    r = check_parity_torch(module, eps=1e-6, dtype=dtype)
    assert r.passed, r.diagnosis
    assert r.inference.eps == pytest.approx(1e-6, rel=0.05) and r.inference.eps_matches


def test_float32_eps_constant_is_torch_finfo():
    assert torch.finfo(torch.float32).eps == FLOAT32_EPS


def test_tensor_function_and_random_gain():
    p = make_probes(32, 1e-5, gain="random", seed=4)
    w = torch.from_numpy(p.weight).to(torch.float32)

    def fn(x):
        return torch.nn.functional.rms_norm(x, (32,), weight=w, eps=1e-5)

    r = check_parity_torch(fn, eps=1e-5, dim=32, gain="random", seed=4)
    assert r.passed, r.diagnosis


def test_adapter_errors():
    from rmsnorm_eps.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="dim="):
        check_parity_torch(lambda x: x, eps=1e-6)
    with pytest.raises(InvalidParameterError, match="not a tensor"):
        run_torch(lambda x: x.numpy(), np.zeros((2, 2)), "float32")
    with pytest.raises(InvalidParameterError, match="float dtype"):
        run_torch(lambda x: x.to(torch.int32), np.zeros((2, 2)), "float32")


def test_bfloat16_outputs_from_safetensors(tmp_path: Path, cli):
    from safetensors.torch import save_file

    probes = make_probes(64, 1e-6, dtype="bfloat16")
    path = tmp_path / "probes.npz"
    write_probes(probes, path)
    x = torch.from_numpy(probes.inputs).to(torch.bfloat16)
    with torch.no_grad():
        y = torch.nn.RMSNorm(64, eps=None).to(torch.bfloat16)(x)
    out = tmp_path / "out.safetensors"
    save_file({"y": y}, str(out))
    got = read_actual(out)
    assert got.dtype == "bfloat16" and got.key == "y"
    assert np.array_equal(got.values, y.to(torch.float64).numpy())  # widened exactly
    res = cli("parity", "--probes", str(path), "--actual", str(out), "--format", "json")
    assert res.exit_code == 1
    import json

    doc = json.loads(res.stdout)
    assert doc["output_dtype"] == "bfloat16"
    assert doc["error_rule"]["thresholds_from"] == "torch.testing defaults for bfloat16"
    assert doc["inferred_eps"] == pytest.approx(1.1920929e-07, rel=0.05)


def test_bad_safetensors_exit_2(tmp_path: Path, cli):
    from safetensors.torch import save_file

    path = tmp_path / "probes.npz"
    write_probes(make_probes(8, 1e-6), path)
    ints = tmp_path / "ints.safetensors"
    save_file({"y": torch.zeros(4, 8, dtype=torch.int32)}, str(ints))
    res = cli("parity", "--probes", str(path), "--actual", str(ints))
    assert res.exit_code == 2 and "ints.safetensors [y]: unsupported dtype int32" in res.stderr
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(ints.read_bytes()[:40])
    res = cli("parity", "--probes", str(path), "--actual", str(broken))
    assert res.exit_code == 2 and "broken.safetensors" in res.stderr
    assert "Traceback" not in res.stderr
