"""End to end: ``ratio`` on .safetensors, torch.save and CSV dumps reports exactly what it reports
on the equivalent .npz (json format; only ``source`` differs)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Result, run_module

_RATIO = ("ratio", "--eps", "1e-5", "--format", "json")


def _q() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    a = (np.abs(rng.standard_normal((32, 8))) * 1e-2).astype(np.float32)
    a[3, 4] = np.nan
    a[5, 1] = np.inf
    a[6, 2] = 1e-9
    b = np.abs(rng.standard_normal(16)).astype(np.float32)
    return {"model.layers.0.input_layernorm": a, "model.norm": b}


def _safetensors(path: Path, arrays: dict[str, np.ndarray], code: str = "F32") -> Path:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {
            "dtype": code,
            "shape": list(a.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _doc(res: Result, code: int = 1) -> dict[str, Any]:
    assert res.exit_code == code, res
    doc: dict[str, Any] = json.loads(res.stdout)
    doc.pop("source")
    return doc


def _same(cli: Callable[..., Result], ref: Path, other: Path, *extra: str) -> dict[str, Any]:
    want = _doc(cli(*_RATIO, *extra, "--q-file", str(ref)))
    got = _doc(cli(*_RATIO, *extra, "--q-file", str(other)))
    assert got == want
    return got


def test_safetensors_like_npz(cli: Callable[..., Result], tmp_path: Path) -> None:
    arrays = _q()
    np.savez(tmp_path / "q.npz", **arrays)  # type: ignore[arg-type]
    st = _safetensors(tmp_path / "q.safetensors", arrays)
    doc = _same(cli, tmp_path / "q.npz", st)
    assert doc["summary"]["nonfinite"] == 2 and doc["summary"]["violations"] > 2
    _same(cli, tmp_path / "q.npz", st, "--raw")
    proc = run_module(*_RATIO, "--q-file", str(st))
    assert proc.returncode == 1, proc.stderr
    assert _doc(Result(1, proc.stdout, proc.stderr)) == doc


def test_safetensors_bf16_like_npz_bits(cli: Callable[..., Result], tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = {k: v.astype(ml_dtypes.bfloat16).view(np.uint16) for k, v in _q().items()}
    np.savez(tmp_path / "q.npz", **bits)  # type: ignore[arg-type]
    st = _safetensors(tmp_path / "q.safetensors", bits, "BF16")
    want = _doc(cli(*_RATIO, "--dtype", "bfloat16", "--q-file", str(tmp_path / "q.npz")))
    assert _doc(cli(*_RATIO, "--q-file", str(st))) == want
    assert want["layers"][0]["dtype"] == "bfloat16"


def test_torch_save_dict_list_single_and_bf16(cli: Callable[..., Result], tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = _q()
    np.savez(tmp_path / "q.npz", **arrays)  # type: ignore[arg-type]
    nested = {"model": {"layers": {"0": {"input_layernorm": None}}, "norm": None}}
    nested["model"]["layers"]["0"]["input_layernorm"] = torch.from_numpy(
        arrays["model.layers.0.input_layernorm"]
    )
    nested["model"]["norm"] = torch.from_numpy(arrays["model.norm"])
    torch.save(nested, tmp_path / "dict.pt")
    doc = _same(cli, tmp_path / "q.npz", tmp_path / "dict.pt")
    proc = run_module(*_RATIO, "--q-file", str(tmp_path / "dict.pt"))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert _doc(Result(1, proc.stdout, proc.stderr)) == doc

    np.savez(tmp_path / "l.npz", *arrays.values())  # members arr_0, arr_1
    torch.save([torch.from_numpy(a) for a in arrays.values()], tmp_path / "l.pt")
    want = _doc(cli(*_RATIO, "--q-file", str(tmp_path / "l.npz")))
    got = _doc(cli(*_RATIO, "--q-file", str(tmp_path / "l.pt")))
    for layer in want["layers"]:
        layer["name"] = layer["name"].removeprefix("arr_")
    want["summary"]["layers_affected"] = [
        n.removeprefix("arr_") for n in want["summary"]["layers_affected"]
    ]
    assert got == want

    one = arrays["model.layers.0.input_layernorm"]
    np.save(tmp_path / "single.npy", one)
    torch.save(torch.from_numpy(one), tmp_path / "single.pt")
    _same(cli, tmp_path / "single.npy", tmp_path / "single.pt")

    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = {k: v.astype(ml_dtypes.bfloat16) for k, v in arrays.items()}
    np.savez(tmp_path / "b.npz", **bits)  # type: ignore[arg-type]  # stored as V2
    views = {
        k: torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16).view(torch.int16)
        for k, v in arrays.items()
    }
    torch.save(views, tmp_path / "b.pt")
    bf = _same(cli, tmp_path / "b.npz", tmp_path / "b.pt", "--dtype", "bfloat16", "--raw")
    assert bf["layers"][0]["dtype"] == "bfloat16"
    res = cli(*_RATIO, "--q-file", str(tmp_path / "b.pt"))
    assert res.exit_code == 2 and "--dtype bfloat16" in res.stderr


def test_csv_like_npz_float64(cli: Callable[..., Result], tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    cols = {"first": np.abs(rng.standard_normal(40)) * 1e-3, "second": np.abs(rng.random(40))}
    cols["second"][7] = np.nan
    np.savez(tmp_path / "q.npz", **cols)  # type: ignore[arg-type]
    lines = ["first,second"] + [
        f"{float(a)!r},{float(b)!r}" for a, b in zip(*cols.values(), strict=True)
    ]
    csv = tmp_path / "q.csv"
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = _same(cli, tmp_path / "q.npz", csv)
    assert [layer["dtype"] for layer in doc["layers"]] == ["float64", "float64"]
    proc = run_module(*_RATIO, "--q-file", str(csv))
    assert proc.returncode == 1 and _doc(Result(1, proc.stdout, proc.stderr)) == doc
    bad = tmp_path / "bad.csv"
    bad.write_text("first\n1e-3\n\n2e-3,\n", encoding="utf-8")
    proc = run_module(*_RATIO, "--q-file", str(bad))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "bad.csv: line 4: 2 cells, the first row has 1" in proc.stderr


def test_csv_column_selects_one_layer_in_ratio_and_compare(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    csv = tmp_path / "q.csv"
    csv.write_text("first,second\n1e-3,5e-7\n2e-3,6e-7\n", encoding="utf-8")
    both = _doc(cli(*_RATIO, str(csv)))
    assert [layer["name"] for layer in both["layers"]] == ["first", "second"]
    by_name = _doc(cli(*_RATIO, str(csv), "--column", "second"))
    by_index = _doc(cli(*_RATIO, str(csv), "--column", "1"))
    assert by_name == by_index
    assert [layer["name"] for layer in by_name["layers"]] == ["second"]
    assert by_name["layers"][0] == both["layers"][1]
    first = _doc(cli(*_RATIO, str(csv), "--column", "first"), code=0)
    assert [layer["name"] for layer in first["layers"]] == ["first"]
    moved = cli("compare", str(csv), "--from", "eps=1e-5", "--to", "eps=1e-6", "--column", "first")
    assert moved.exit_code in (0, 1) and "second" not in moved.stdout
    res = cli(*_RATIO, str(csv), "--column", "third")
    assert res.exit_code == 2 and "third" in res.stderr
    npz = tmp_path / "q.npz"
    np.savez(npz, a=np.ones(3))
    res = cli(*_RATIO, str(npz), "--column", "a")
    assert res.exit_code == 2 and "--column applies to .csv/.tsv dumps only" in res.stderr
