"""rmsnorm_eps.dumps: the per-layer driver's reuse of one analysis for layers that are the same
stored bytes (a tensor saved under many names): analysed once, each name reported, results
equal to analysing separate copies; layers with their own settings analysed apart."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rmsnorm_eps.analysis as analysis
import rmsnorm_eps.compare.analysis as compare_analysis
from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.compare.analysis import compare_dump

torch = pytest.importorskip("torch")


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[str]:
    calls: list[str] = []
    inner = getattr(module, name)

    def counted(src: Any, *args: Any, **kw: Any) -> Any:
        calls.append(src.name)
        return inner(src, *args, **kw)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The same tensor under 300 names (plus one other tensor), and the same data with every
    name holding its own copy."""
    rng = np.random.default_rng(21)
    q = torch.from_numpy(rng.uniform(1e-8, 1e-3, size=(4, 64)).astype(np.float32))
    other = torch.from_numpy(np.array([1e-12, 5.0], np.float32))
    names = [f"model.layers.{i}.input_layernorm" for i in range(300)]
    one: dict[str, Any] = dict.fromkeys(names, q)
    one["final_norm"] = other
    copies: dict[str, Any] = {n: q.clone() for n in names}
    copies["final_norm"] = other.clone()
    torch.save(one, tmp_path / "shared.pt")
    torch.save(copies, tmp_path / "copies.pt")
    return tmp_path / "shared.pt", tmp_path / "copies.pt", names


def _layers(report: Any) -> list[Any]:
    return [dataclasses.asdict(layer) for layer in report.layers]


def test_one_tensor_under_many_names_is_analysed_once(
    shared: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, copies, names = shared
    calls = _counting(monkeypatch, analysis, "_analyze_layer")
    report = analyze_dump(path, 1e-6, top_k=3)
    assert len(calls) == 2  # the shared tensor once, the other one once
    calls.clear()
    separate = analyze_dump(copies, 1e-6, top_k=3)
    assert len(calls) == 301
    assert [ly.name for ly in report.layers] == [*names, "final_norm"]
    assert _layers(report) == _layers(separate)
    assert report.violations == separate.violations == 300 * report.layers[0].violations + 1


def test_names_with_their_own_eps_are_analysed_apart(
    shared: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, copies, names = shared
    calls = _counting(monkeypatch, analysis, "_analyze_layer")
    eps = {n: (1e-6 if i % 2 else 1e-5) for i, n in enumerate(names)} | {"final_norm": 1e-6}
    report = analyze_dump(path, eps)
    assert len(calls) == 3  # two eps for the shared tensor, and the other tensor
    assert _layers(report) == _layers(analyze_dump(copies, eps))
    assert {ly.eps for ly in report.layers} == {1e-6, 1e-5}


def test_compare_reuses_the_shared_tensor_too(
    shared: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, copies, _ = shared
    calls = _counting(monkeypatch, compare_analysis, "_compare_layer")
    report = compare_dump(path, "eps=1e-5", "eps=1e-6")
    assert len(calls) == 2
    assert _layers(report) == _layers(compare_dump(copies, "eps=1e-5", "eps=1e-6"))


def test_views_of_one_storage_at_other_offsets_are_not_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = torch.arange(1, 9, dtype=torch.float32) * 1e-6
    torch.save({"a": base[:4], "b": base[4:], "c": base[:4]}, tmp_path / "views.pt")
    calls = _counting(monkeypatch, analysis, "_analyze_layer")
    report = analyze_dump(tmp_path / "views.pt", 1e-6)
    assert calls == ["a", "b"]  # c is a's bytes again; b starts elsewhere
    a, b, c = report.layers
    assert (a.min_q, b.min_q, c.min_q) == pytest.approx((1e-6, 5e-6, 1e-6), rel=1e-6, abs=0)
    assert c.name == "c" and dataclasses.replace(c, name="a") == a
