"""Many tiny layers (issue 12, item 5: time linear in the input): the per-layer fast paths give
exactly the values of the general paths they shortcut.

* :meth:`LayerAccumulator._fold_decades` folds a small chunk with one ``searchsorted``
  instead of one comparison pass per decade;
* :func:`numerics.attenuation` / :func:`numerics.attenuation_loss` compute a few ratios with
  ``math`` instead of numpy;
* :func:`engine.unravel` of a 1-D shape skips numpy;
* decade thresholds are cached across layers.
"""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps import engine, numerics, summary
from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.config.yaml_reader import MAX_YAML_PATTERNS
from rmsnorm_eps.sources import MAX_LAYERS
from rmsnorm_eps.summary import LayerAccumulator
from tests.conftest import write_many_npz

RNG = np.random.default_rng(12)


def _values(dtype: type, n: int) -> np.ndarray:
    """Finite q over many decades, with exact zeros, decade edges and subnormals."""
    exps = RNG.uniform(-45 if dtype is np.float32 else -320, 38, n)
    v = (10.0**exps).astype(dtype)
    v[:: max(1, n // 7)] = 0
    edges = np.array([1e-5 * 10.0**k for k in range(-3, 4)], dtype)
    v[1 : 1 + min(n - 1, edges.size)] = edges[: max(0, min(n - 1, edges.size))]
    if dtype is np.float32:
        v[-1] = np.float32(1e-45)  # subnormal
    return v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 3, 17, 300, 4096])
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 3.7e-12])
def test_small_chunk_decades_equal_the_pass_per_decade(
    dtype: type, n: int, eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    v = _values(dtype, n)
    fast = LayerAccumulator(eps, 49.25)
    fast.update(v, 0)
    monkeypatch.setattr(summary, "_SMALL_CHUNK", 0)
    summary._THRESHOLDS.clear()
    slow = LayerAccumulator(eps, 49.25)
    slow.update(v, 0)
    assert fast.decades == slow.decades
    assert (fast.below, fast.zero_count, fast.count) == (slow.below, slow.zero_count, slow.count)
    # and both equal the definition: floor(log10(q/eps)) by exact thresholds
    r = v.astype(np.float64) / eps
    pos = r[r > 0]
    assert sum(fast.decades.values()) == pos.size


def test_threshold_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary, "_CACHE_LIMIT", 8)
    summary._THRESHOLDS.clear()
    for i in range(50):
        acc = LayerAccumulator(1e-5 * (1 + i), 49.25)
        acc.update(np.array([1.0, 2.0, 1e-9], np.float32), 0)
        assert len(summary._THRESHOLDS) <= 8


@pytest.mark.parametrize("fn", [numerics.attenuation, numerics.attenuation_loss])
def test_small_attenuation_equals_numpy(fn, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    r = np.concatenate(
        [
            [0.0, 5e-324, 1e-300, 0.5, 1.0, np.nextafter(1.0, 2.0), 49.25, 1e200, 1.7e308],
            [np.inf],
            RNG.uniform(0, 100, 6),
        ]
    )
    small = [fn(x) for x in r] + [fn(r[i : i + 4]) for i in range(0, r.size, 4)]
    monkeypatch.setattr(numerics, "_SMALL", -1)
    big = [fn(x) for x in r] + [fn(r[i : i + 4]) for i in range(0, r.size, 4)]
    for a, b in zip(small, big, strict=True):
        assert type(a) is type(b)
        np.testing.assert_array_equal(a, b)
    with pytest.raises(numerics.InvalidParameterError):
        fn([1.0, np.nan])
    monkeypatch.setattr(numerics, "_SMALL", 16)
    for bad in ([1.0, np.nan], -1.0, [np.nan]):
        with pytest.raises(numerics.InvalidParameterError):
            fn(bad)


def test_unravel_1d_matches_numpy() -> None:
    for shape, order in (((7,), "C"), ((7,), "F"), ((3, 4), "C"), ((3, 4), "F")):
        for flat in range(int(np.prod(shape))):
            want = tuple(int(i) for i in np.unravel_index(flat, shape, order=order))
            assert engine.unravel(flat, shape, order) == want


def test_many_tiny_members_give_one_result_each(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """4,096 tiny members (the layer cap): each layer analysed once, with the same per-layer
    figures (time per member is in benchmarks/bench_many_layers.py, not asserted here)."""
    from rmsnorm_eps import analysis

    q = np.array([1.0, 2.0, 1e-9], np.float32)
    n = MAX_LAYERS
    path = write_many_npz(tmp_path / "m.npz", {f"layer.{i}": q for i in range(n)})
    calls: list[str] = []
    analyse = analysis._analyze_layer

    def counted(src, *args):  # type: ignore[no-untyped-def]
        calls.append(src.name)
        return analyse(src, *args)

    monkeypatch.setattr(analysis, "_analyze_layer", counted)
    report = analyze_dump(path, 1e-5)
    assert calls == [f"layer.{i}" for i in range(n)]
    assert report.members_total == report.members_analysed == n
    assert len({(x.below_bound, x.decades, x.min_q) for x in report.layers}) == 1
    assert report.layers[0].below_bound == 1  # 1e-9 / 1e-5 < 49.25


def test_float32_q_near_its_max_with_tiny_eps_warns_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A decade edge above float32's range is +inf in float32, not an overflow warning on
    stderr (a second stderr line)."""
    from tests.conftest import run_module

    np.save(tmp_path / "q.npy", np.array([3e38, 1.0, 1e-30], np.float32))
    res = run_module("ratio", "--eps", "3.7e-12", "--q-file", str(tmp_path / "q.npy"))
    assert res.returncode == 1, res.stderr
    assert len(res.stderr.splitlines()) == 1, res.stderr


def _many_globs(path, n: int, names: tuple[str, ...] = ()) -> None:  # type: ignore[no-untyped-def]
    import json

    layers = [f"model.layers.{i}.*norm" for i in range(n - len(names))] + list(names)
    path.write_text(
        "schema_version: 1\nmodel: m\ndefaults:\n  eps: 1e-5\n  placement: inside\n"
        "  gain: w\n  norm: rms\nlayers:\n"
        + "".join(f"  {json.dumps(name)}: {{eps: 1e-6}}\n" for name in layers),
        encoding="utf-8",
    )


def test_config_show_hostile_globs_at_the_cap(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """4,096 globs (the pattern cap), some hostile: inert output (the globs tried per name are
    counted in tests/unit/test_config_globs.py)."""
    from tests.conftest import run_module
    from tests.helpers import HOSTILE_CONFIG_NAMES as CONFIG_NAMES
    from tests.runner_lines import assert_inert

    path = tmp_path / "big.yaml"
    _many_globs(path, MAX_YAML_PATTERNS, CONFIG_NAMES)
    res = run_module("config", "show", str(path))
    assert res.returncode == 0, res.stderr
    assert_inert(res.stdout, res.stderr, "text")
    last = MAX_YAML_PATTERNS - len(CONFIG_NAMES) - 1
    assert "[/x]" in res.stdout and f"model.layers.{last}.*norm" in res.stdout
