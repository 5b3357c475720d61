"""capture/output.py: the q dump's members (names, dtypes, companions only where they carry
information), the YAML config document (defaults are the most common settings, entries list
only what differs), and the per-rank output paths. The dump is read back with ``np.load``."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.output import (
    NORM_CODES,
    config_document,
    dump_bytes,
    module_facts,
    rank_outputs,
    rank_path,
    write_config,
    write_dump,
)
from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord


def _mod(name: str, n: int, **over: object) -> ModuleRecord:
    q = np.linspace(0.1, 1.0, n) + 1e-9  # not float32-exact: the dump rounds it
    base: dict[str, object] = {
        "name": name,
        "class_name": "LlamaRMSNorm",
        "kind": "RMSNorm-like",
        "eps": 1e-6,
        "eps_source": "attribute variance_epsilon",
        "dim": 32,
        "input_dtype": "float32",
        "gain": "w",
        "weight": None,
        "weight_dtype": "float32",
        "layout": "tokens [B, T, D]",
        "heads": 1,
        "calls": 1,
        "count": n,
        "q": q,
        "position": np.arange(n, dtype=np.int64),
        "batch": np.zeros(n, dtype=np.int64),
        "head": np.zeros(n, dtype=np.int64),
        "call": np.zeros(n, dtype=np.int64),
        "norm": "rms",
        "max_calls": 1,
    }
    base.update(over)
    return ModuleRecord(**base)  # type: ignore[arg-type]


def _result(*mods: ModuleRecord, summary_only: bool = False) -> CaptureResult:
    return CaptureResult(mods, 1, 4, summary_only, "float64", None)


def test_rank_paths() -> None:
    assert rank_path("out/q-rank{rank}.npz", 3) == Path("out/q-rank3.npz")
    assert rank_path("q.npz", 3) == Path("q.npz")
    assert rank_outputs("--save-data", "q{rank}.npz", 2) == [
        ("--save-data", Path("q0.npz")),
        ("--save-data", Path("q1.npz")),
    ]
    assert rank_outputs("--save-data", "q{rank}.npz", 0) == [("--save-data", Path("q0.npz"))]
    assert rank_outputs("--out", "q.npz", 4) == [("--out", Path("q.npz"))]
    assert rank_outputs("--out", None, 4) == [("--out", None)]


def test_dump_members_and_companions() -> None:
    a = _mod("a", 4)
    heads = _mod(
        "b.k_norm",
        6,
        heads=2,
        head=np.tile([0, 1], 3),
        max_calls=2,
        call=np.repeat([0, 1], 3),
        norm="layer",
    )
    never = _mod("c", 0, count=0, q=None)
    data = np.load(io.BytesIO(dump_bytes(_result(a, heads, never))), allow_pickle=False)
    assert sorted(data.files) == sorted(
        [
            "a",
            "a::position",
            "a::batch",
            "b.k_norm",
            "b.k_norm::position",
            "b.k_norm::batch",
            "b.k_norm::head",
            "b.k_norm::call",
            "b.k_norm::norm",
        ]
    )
    assert data["a"].dtype == np.float32
    np.testing.assert_array_equal(data["a"], a.q.astype(np.float32))  # type: ignore[union-attr]
    assert data["a::position"].dtype == np.int64
    np.testing.assert_array_equal(data["b.k_norm::head"], [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(data["b.k_norm::call"], [0, 0, 0, 1, 1, 1])
    norm = data["b.k_norm::norm"]
    assert norm.dtype == np.int8 and set(norm.tolist()) == {NORM_CODES["layer"]} == {1}
    assert NORM_CODES == {"rms": 0, "layer": 1, "gated-rms": 2, "l2": 3}


def test_dump_refusals() -> None:
    with pytest.raises(CaptureError, match="no norm module saw a token"):
        dump_bytes(_result(_mod("c", 0, count=0)))
    with pytest.raises(CaptureError, match="summary-only capture has no q values"):
        dump_bytes(_result(_mod("a", 3), summary_only=True))


def test_write_dump_and_config(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    res = _result(_mod("a", 3), _mod("b", 2, eps=1e-5, gain="1+w", norm="layer"), _mod("c", 2))
    write_dump(res, tmp_path / "q.npz")
    assert sorted(np.load(tmp_path / "q.npz").files)[:3] == ["a", "a::batch", "a::position"]
    write_config(res, tmp_path / "c.yaml", "tiny", "capture")
    doc = yaml.safe_load((tmp_path / "c.yaml").read_text(encoding="utf-8"))
    assert doc == config_document(res, "tiny", "capture")


def test_config_document_defaults_and_entries() -> None:
    res = _result(
        _mod("a", 3),
        _mod("b", 2, eps=1e-5, gain="1+w", norm="layer", dim=16),
        _mod("c", 2),
        _mod("unseen", 0, count=0),
    )
    doc = config_document(res, "tiny", "capture of tiny")
    assert (
        doc["schema_version"] == 1 and doc["model"] == "tiny" and doc["source"] == "capture of tiny"
    )
    assert doc["defaults"] == {
        "eps": 1e-6,
        "placement": "inside",
        "gain": "w",
        "gain_baked": False,
        "reduction_dtype": "float32",
        "weight_after_cast": True,
        "dim": 32,
        "norm": "rms",
    }
    assert doc["layers"] == {
        "a": {"eps": 1e-6, "dim": 32},
        "b": {"eps": 1e-5, "dim": 16, "norm": "layer", "gain": "1+w"},
        "c": {"eps": 1e-6, "dim": 32},
    }


def test_config_reduction_follows_first_module() -> None:
    doc = config_document(_result(_mod("a", 2, input_dtype="float64", gain="1+w")), "m", "s")
    assert doc["defaults"]["reduction_dtype"] == "float64"
    assert doc["defaults"]["weight_after_cast"] is False
    doc = config_document(_result(_mod("a", 2, kind="torch.nn.RMSNorm")), "m", "s")
    assert doc["defaults"]["weight_after_cast"] is False


def test_module_facts() -> None:
    facts = module_facts(_mod("a", 3, max_calls=2, group_size=4, gate_before=True))
    assert facts["name"] == "a" and facts["class"] == "LlamaRMSNorm"
    assert facts["calls_per_forward"] == 2 and facts["count"] == 3
    assert facts["group_size"] == 4 and facts["gate_before"] is True
    assert "q" not in facts and "max_calls" not in facts
