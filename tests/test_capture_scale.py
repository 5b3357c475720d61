"""Capture at scale: the device-side q reduction (same q as a float64 host computation), the
bytes that cross to the host per forward pass, and torchrun ranks (gloo) whose reduced summary
is byte for byte the one-process summary."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rmsnorm_eps.capture import hooks  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.modules import find_norm_modules  # noqa: E402
from rmsnorm_eps.capture.reduce import reduce_rows  # noqa: E402
from rmsnorm_eps.capture.transfers import TransferCounter  # noqa: E402
from tests.conftest import smollm2_dir  # noqa: E402
from tests.helpers import TEXTS, tiny_llama, tiny_qwen3  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCALES = (1e4, 1.0, 1e-3, 1e-20)  # rows of |x| up to 1e4 and down to 1e-20


def _reference(x: Any) -> np.ndarray:
    """Today's float64 path, written independently: mean of squares in numpy float64."""
    xd = x.detach().to(dtype=torch.float64).numpy()
    return np.mean(xd * xd, axis=-1, dtype=np.float64)


@pytest.mark.parametrize("q_dtype", ["float64", "float32"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_device_q_matches_float64_on_extreme_rows(q_dtype: str, dtype: str) -> None:
    g = torch.Generator().manual_seed(3)
    rows = torch.randn(len(SCALES), 3, 576, generator=g, dtype=torch.float64)
    rows *= torch.tensor(SCALES, dtype=torch.float64)[:, None, None]
    x = rows.to(getattr(torch, dtype))
    x[1, 2] = 0  # an all-zero vector: q = 0, not NaN
    got = reduce_rows(x, "rms", compute=q_dtype).numpy()[..., 0]
    want = _reference(x)
    assert got.dtype == np.float64 and want[1, 2] == 0 and got[1, 2] == 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    # the scale matters: unscaled float32 squares of 1e-20 are subnormal and lose digits
    unscaled = (x[3].float() ** 2).mean(-1).double().numpy()
    assert np.abs(unscaled / want[3] - 1).max() > 3e-6


def _norm_inputs(model: Any) -> tuple[dict[str, list[Any]], list[Any]]:
    """Every norm module's inputs (copied by independent hooks)."""
    seen: dict[str, list[Any]] = {}
    handles = []
    named = dict(model.named_modules())
    for spec in find_norm_modules(model):
        store: list[Any] = []
        seen[spec.name] = store
        handles.append(
            named[spec.name].register_forward_pre_hook(
                lambda m, a, s=store: s.append(a[0].detach().clone())
            )
        )
    return seen, handles


def _extreme_llama(dtype: Any) -> Any:
    model = tiny_llama()
    with torch.no_grad():  # embeddings of ids 1..4 at |x| ~ 1e4 .. 1e-20
        emb = model.get_input_embeddings().weight  # type: ignore[attr-defined]
        for i, s in enumerate(SCALES, start=1):
            emb[i] *= s
    return model.to(dtype)  # type: ignore[attr-defined]


@pytest.mark.parametrize("compute", ["float64", "float32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_model_q_equals_the_float64_path(dtype: Any, compute: str, monkeypatch: Any) -> None:
    """The reduction on the activation's device (float64 on the CPU; the scaled float32 path
    that accelerators take, forced here) keeps q within 1e-6 of a float64 computation."""
    model = _extreme_llama(dtype)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [4, 3, 2, 1, 7, 0]])
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    seen, handles = _norm_inputs(model)
    old = hooks.reduce_rows
    monkeypatch.setattr(
        hooks, "reduce_rows", lambda x, kind, **kw: old(x, kind, **kw, compute=compute)
    )
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    for h in handles:
        h.remove()
    keep = mask.bool().numpy()
    for m in cap.result().modules:
        (x,) = seen[m.name]
        want = _reference(x)[keep]
        assert m.q is not None and m.q.shape == want.shape == (10,)
        np.testing.assert_allclose(m.q, want, rtol=1e-6, atol=0, err_msg=m.name)
    first = cap.result().modules[0]  # the embeddings themselves (std 0.02): 4e4 to 4e-44
    assert first.q is not None and first.q.max() > 1e4 and first.q.min() < 1e-43


def _q_values(model: Any, ids: Any) -> int:
    """How many per-vector q values one forward computes (padding included): B*T*H per call."""
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return sum(m.calls * ids.numel() * m.heads for m in cap.result().modules)


@pytest.mark.parametrize("make", [tiny_llama, tiny_qwen3], ids=["llama", "qwen3-per-head"])
def test_hooks_move_only_q_to_the_host(make: Callable[[], Any], monkeypatch: Any) -> None:
    model = make()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])

    def moved(capture: bool) -> int:
        """Bytes moved to the host by the second forward pass (the first classifies each norm
        once, on a small probe)."""
        with torch.no_grad():
            if capture:
                with QCapture(model):
                    model(input_ids=ids, attention_mask=mask)
                    with TransferCounter() as counter:
                        model(input_ids=ids, attention_mask=mask)
            else:
                with TransferCounter() as counter:
                    model(input_ids=ids, attention_mask=mask)
        return counter.bytes

    q_bytes = 8 * _q_values(model, ids)  # float64 q, padding included
    overhead = 8 * ids.numel()  # the attention mask, once per forward
    extra = moved(True) - moved(False)
    assert q_bytes <= extra <= q_bytes + overhead
    # the same test catches a hook that copies the activation to the host, as capture once did
    old = hooks.reduce_rows

    def to_host(x: Any, kind: Any, **kw: Any) -> Any:
        return old(x.to(device="cpu", dtype=torch.float64), kind, **kw)

    monkeypatch.setattr(hooks, "reduce_rows", to_host)
    assert moved(True) - moved(False) > q_bytes + overhead + 4 * q_bytes


def test_one_host_copy_per_forward_pass() -> None:
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids)  # the first pass also classifies each norm once, on a probe
        calls = []
        for _ in range(2):
            with TransferCounter() as counter:
                model(input_ids=ids)
            calls.append(counter.calls)
    without = []
    for _ in range(2):
        with TransferCounter() as counter, torch.no_grad():
            model(input_ids=ids)
        without.append(counter.calls)
    assert [c - w for c, w in zip(calls, without)] == [1, 1]  # 5 modules, one .cpu() each pass
    assert all(m.count == 30 and m.calls == 3 for m in cap.result().modules)


# ---------------------------------------------------------------- torchrun
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _capture_cmd(args: list[str], nproc: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``rmsnorm-eps capture ARGS`` under torchrun with ``nproc`` ranks (gloo on CPU)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={_free_port()}",
        "-m",
        "rmsnorm_eps",
        "capture",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def _in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``rmsnorm-eps capture ARGS`` in this process (the one-process reference: torch is
    imported here already), in ``cwd``, on one thread as the ranks run."""
    from typer.testing import CliRunner

    from rmsnorm_eps.cli import app

    threads, here = torch.get_num_threads(), Path.cwd()
    torch.set_num_threads(1)
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(app, ["capture", *args], catch_exceptions=False)
    finally:
        os.chdir(here)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


def _runs(
    tmp_path: Path, model: list[str], texts: list[str], extra: list[str], nprocs: tuple[int, ...]
) -> dict[int, tuple[subprocess.CompletedProcess[str], str]]:
    """The capture in one process (in this one) and under torchrun with each of ``nprocs``."""
    args = [*model, *(a for t in texts for a in ("--text", t)), *extra]
    runs = {}
    for n in (1, *nprocs):
        cwd = tmp_path / f"n{n}"  # the same relative --out in every run: it is the source
        cwd.mkdir(exist_ok=True)
        full = [*args, "--summary-only", "--save-data", "s.json"]
        r = _in_process(full, cwd) if n == 1 else _capture_cmd(full, n, cwd)
        assert r.returncode == 0, r.stderr[-3000:]
        out = cwd / "s.json"
        runs[n] = (r, out.read_text())
    return runs


@pytest.mark.slow
def test_torchrun_tiny_model_empty_rank_and_uneven_shards(model_dir: Path, tmp_path: Path) -> None:
    """3 ranks over 2 batches (rank 2 runs nothing), then 2 ranks over 5 batches (3 + 2): the
    rank-0 summary file equals the one-process file byte for byte."""
    model = ["--model", str(model_dir)]
    runs = _runs(tmp_path, model, TEXTS[:3], ["--batch-size", "2"], (3,))
    assert runs[3][1] == runs[1][1]
    assert json.loads(runs[1][1])["layers"][0]["count"] == 13  # 9 + 3 + 1 tokens
    assert "over 3 ranks" in runs[3][0].stderr and runs[3][0].stdout == runs[1][0].stdout
    runs = _runs(tmp_path, model, TEXTS, ["--batch-size", "1", "--sort-by-length"], (2,))
    assert runs[2][1] == runs[1][1]


@pytest.mark.slow
def test_torchrun_dumps_per_rank_merge_like_one_dump(
    model_dir: Path, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    args = ["--model", str(model_dir), *(a for t in TEXTS for a in ("--text", t))]
    r = _capture_cmd([*args, "--batch-size", "2", "--save-data", "q-rank{rank}.npz"], 2, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    with np.load(tmp_path / "q-rank0.npz") as z0, np.load(tmp_path / "q-rank1.npz") as z1:
        assert sorted(set(z0["model.norm::batch"])) == [0, 1, 2, 3]  # batches (0, 1), (2, 3)
        assert sorted(set(z1["model.norm::batch"])) == [4]  # the sample index, not 0
    r1 = _in_process([*args, "--batch-size", "2", "--save-data", "q.npz"], tmp_path)
    assert r1.returncode == 0, r1.stderr
    # rank 0 prints the whole job's table (counts summed, minima over the ranks)
    assert "5 text(s), 21 tokens" in r1.stdout
    assert r.stdout.replace("q-rank{rank}.npz", "q.npz") == r1.stdout
    # each rank's dump -> ratio summary; merge = ratio on the one-process dump
    summaries = []
    for name in ("q-rank0", "q-rank1", "q"):
        s = tmp_path / f"{name}.json"
        res = cli(
            "ratio",
            "--eps",
            "1e-5",
            "--q-file",
            str(tmp_path / f"{name}.npz"),
            "--save-summary",
            str(s),
            "--format",
            "json",
        )
        assert res.exit_code in (0, 1), res.stderr
        summaries.append(s)
    merged = cli("merge", str(summaries[0]), str(summaries[1]), "--format", "json")
    whole = cli("merge", str(summaries[2]), "--format", "json")
    strip = _strip_shards
    assert strip(json.loads(merged.stdout)["layers"]) == strip(json.loads(whole.stdout)["layers"])


def _strip_shards(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for layer in layers:
        for part in (layer, layer.get("first_token", {}), layer.get("other_tokens", {})):
            for item in part.get("worst", []) + part.get("nonfinite_examples", []):
                item.pop("shard", None)
                item.pop("shard_index", None)
    return layers


@pytest.mark.slow
def test_torchrun_smollm2_summary_equals_one_process(tmp_path: Path) -> None:
    """SmolLM2-135M under torchrun --nproc-per-node 2 (gloo, CPU), 3 texts one per batch: rank
    0 runs 2 batches, rank 1 one; the written summary and the printed report are the
    one-process ones, exactly."""
    if shutil.which("torchrun") is None and importlib.util.find_spec("torch.distributed") is None:
        pytest.skip("no torch.distributed")
    model = ["--model", smollm2_dir(), "--gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"]
    texts = ["The quick brown fox jumps over the lazy dog.", "Hello", "RMSNorm divides x."]
    runs = _runs(tmp_path, model, texts, ["--batch-size", "1"], (2,))
    assert runs[2][1] == runs[1][1]
    assert runs[2][0].stdout == runs[1][0].stdout
    layers = json.loads(runs[1][1])["layers"]
    assert len(layers) == 61 and layers[0]["first_token"]["count"] == 3


# ---------------------------------------------------------------- devices and dtypes
def test_devices_and_dtypes(monkeypatch: Any) -> None:
    from rmsnorm_eps.capture.distributed import rank_device
    from rmsnorm_eps.capture.errors import CaptureError
    from rmsnorm_eps.capture.loading import placement, resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cpu") == "cpu" and resolve_device("auto") == "cpu"  # no GPU: cpu
    for bad, message in (
        ("cuda", "--device cuda: no CUDA device is visible"),
        ("cuda:1", "--device cuda:1: no CUDA device is visible"),
        ("gpu\n0", "--device 'gpu\\n0' is not one of cpu, cuda, cuda:N, mps, auto"),
    ):
        with pytest.raises(CaptureError, match=re.escape(message)):
            resolve_device(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device("cuda") == "cuda:0" and resolve_device("auto") == "auto"
    with pytest.raises(CaptureError, match="only 2 CUDA device"):
        resolve_device("cuda:2")
    assert placement("auto", "bf16") == {"dtype": torch.bfloat16, "device_map": "auto"}
    assert placement("cpu", "fp16") == {"dtype": torch.float16}  # plain load on the CPU
    assert placement("cuda:1", "float32") == {"dtype": torch.float32, "device_map": "cuda:1"}
    with pytest.raises(CaptureError, match="dtype must be one of"):
        placement("cpu", "int8")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert rank_device("cuda") == "cuda:3" and rank_device("cuda:1") == "cuda:1"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert rank_device("cuda") == "cuda"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cli_half_precision_models(
    dtype: str, model_dir: Path, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    out = tmp_path / "q.npz"
    r = cli(
        "capture", "--model", str(model_dir), "--text", TEXTS[0], "--text", TEXTS[1],
        "--dtype", dtype, "--device", "auto", "--save-data", str(out), "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    want = {"fp16": "float16", "bf16": "bfloat16"}[dtype]
    assert {m["input_dtype"] for m in doc["modules"]} == {want} and doc["tokens"] == 12
