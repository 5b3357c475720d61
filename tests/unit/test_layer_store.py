"""LayerStore: exact round trip, compactness, sequence behaviour, equality and folded totals."""

from __future__ import annotations

import gc
import json
import math
import struct
import tracemalloc
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps.analysis import (
    LAYER_CODEC,
    LayerCodec,
    LayerResult,
    NonfiniteInput,
    RatioReport,
    WorstInput,
    analyze_dump,
)
from rmsnorm_eps.compare.analysis import (
    CompareCodec,
    CompareLayer,
    CompareReport,
    DecadeRow,
    MovedInput,
    compare_dump,
)
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.dumps import consume_layers
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.escape import json_text
from rmsnorm_eps.layer_store import LayerStore, LayerStoreBuilder
from rmsnorm_eps.merge.summary_format import summary_chunks, summary_document
from rmsnorm_eps.plot import worst_compare_layers, worst_layers

HOSTILE_NAMES = [
    "",
    "model.layers.0.input_layernorm",
    "bad\udcff\udc80name",  # lone surrogates (a surrogateescape'd file name)
    "\ud800",
    "line\nbreak\r\x00\x1b[31m",
    "##[error]x ##vso[task] ::error::y",
    "é漢字🙂",
]
SPECIAL = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1.7976931348623157e308]
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]


def _bits(value: Any) -> Any:
    """A value with every float replaced by its IEEE bytes and every type recorded, so two
    values are 'identical' only when equal bit for bit (NaN payloads, -0.0 included)."""
    if isinstance(value, float):
        return ("f", struct.pack("<d", value))
    if isinstance(value, tuple):
        return ("t", tuple(_bits(v) for v in value))
    if is_dataclass(value):
        return (type(value).__name__, tuple(_bits(getattr(value, f.name)) for f in fields(value)))
    return (type(value).__name__, value)


def _worst(i: int, q: float, shard: int | None = None) -> WorstInput:
    return WorstInput((i,), q, q / 1e-5, 0.5, 0.5, shard, None if shard is None else (i, 2))


def _layer(name: str, i: int = 0, floats: float = 1.0, violations: int = 1) -> LayerResult:
    return LayerResult(
        name=name,
        eps=1e-5,
        shape=(3,),
        dtype="float32",
        raw_dim=None,
        count=3,
        nan_count=0,
        inf_count=0,
        zero_count=0,
        below_bound=violations,
        min_q=floats,
        max_q=2.0,
        min_ratio=floats / 1e-5,
        min_attenuation=0.25,
        worst=(_worst(2, floats), _worst(0, 1.0), _worst(1, 2.0)),
        nonfinite_examples=(),
        decades=((-5, 1), (4, 1), (5, i)),
    )


def _full_layer(name: str, f: float) -> LayerResult:
    """Every field away from its default, every float special, nested parts."""
    part = replace(
        _layer(name + " (first token)", floats=f),
        nonfinite_examples=(
            NonfiniteInput((0, 1), math.nan),
            NonfiniteInput((1,), math.inf, 3, (4,)),
        ),
        quantity="v",
    )
    return replace(
        _layer(name, floats=f),
        shape=(2**40, 0, 7),
        raw_dim=2**62,
        count=2**63 - 1,
        nan_count=5,
        inf_count=2**70,
        min_q=None,
        max_q=f,
        min_ratio=None,
        min_attenuation=None,
        worst=(
            WorstInput((1, 2, 3), f, -0.0, math.inf, NAN_PAYLOAD, 0, (1, 2, 3)),
            WorstInput((), -math.inf, math.nan, 5e-324, -0.0),
        ),
        nonfinite_examples=(NonfiniteInput((9,), -math.nan),),
        decades=((-300, 2**40), (300, 0)),
        first_token=part,
        other_tokens=replace(part, name=name + " (other tokens)", first_token=part),
        eps_source="cfg.json: rms_norm_eps \udcff",
        quantity="v",
    )


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.parametrize("f", [*SPECIAL, NAN_PAYLOAD])
def test_layer_result_round_trip_is_exact(name: str, f: float) -> None:
    layer = _full_layer(name, f)
    store = LayerStore.of([layer, _layer(name)], LAYER_CODEC)
    assert _bits(store[0]) == _bits(layer)
    assert _bits(store[1]) == _bits(_layer(name))
    assert [_bits(x) for x in store] == [_bits(layer), _bits(_layer(name))]


@settings(max_examples=60, deadline=None)
@given(
    name=st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF)),
    floats=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=3, max_size=3),
    ints=st.lists(st.integers(min_value=0, max_value=2**80), min_size=2, max_size=2),
)
def test_round_trip_property(name: str, floats: list[float], ints: list[int]) -> None:
    a, b, c = floats
    layer = replace(
        _full_layer(name, a),
        eps=b,
        min_q=c,
        count=ints[0],
        worst=(WorstInput((ints[1],), a, b, c, a, None, None),),
    )
    (back,) = LayerStore.of([layer], LAYER_CODEC)
    assert _bits(back) == _bits(layer)


def test_numpy_scalars_become_plain_numbers() -> None:
    """marshal would write a numpy scalar as its raw bytes: the codec makes it int/float."""
    layer = replace(_layer("x"), count=np.int64(3), min_q=np.float64(0.5), shape=(np.int64(3),))
    (back,) = LayerStore.of([layer], LAYER_CODEC)
    assert (type(back.count), type(back.min_q), type(back.shape[0])) == (int, float, int)
    assert back == layer


def _compare_layer(name: str, moved: int, change: float | None) -> CompareLayer:
    spec_a, spec_b = parse_spec("eps=1e-6", "--from"), parse_spec("eps=1e-5,dtype=float16", "--to")
    m = MovedInput((1, 2), 0.5, -0.0, math.nan, math.inf)
    return CompareLayer(
        name=name,
        shape=(2, 3),
        dtype="float16",
        raw_dim=8,
        count=6,
        nan_count=1,
        inf_count=0,
        zero_count=2,
        nonfinite_factor=1,
        moved=moved,
        max_abs_change=change,
        min_factor=None if change is None else 1 - change,
        max_factor=None if change is None else 1 + change,
        worst=(m, MovedInput((0, 0), 1.0, 1e6, 1.5, 0.5)),
        nonfinite_examples=(m,),
        decades=(DecadeRow(-3, 2, 1, -0.0), DecadeRow(5, 1, 0, math.inf)),
        spec_from=spec_a,
        spec_to=spec_b,
        quantity="v",
    )


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_compare_layer_round_trip_is_exact(name: str) -> None:
    layer = _compare_layer(name, 3, 0.25)
    nested = replace(layer, first_token=layer, other_tokens=_compare_layer(name + "o", 0, None))
    store = LayerStore.of([nested, layer], CompareCodec())
    assert _bits(store[0]) == _bits(nested)
    assert _bits(store[-1]) == _bits(layer)
    assert store[0].spec_from is store[1].spec_from  # the settings are kept once


def test_sequence_behaviour() -> None:
    layers = [_layer(f"l{i}", i) for i in range(7)]
    store = LayerStore.of(layers, LAYER_CODEC)
    assert len(store) == 7
    assert store[-1] == layers[-1] and store[3] == layers[3]
    assert store[2:6:2] == layers[2:6:2] and isinstance(store[2:6:2], LayerStore)
    assert store[::-1] == tuple(reversed(layers))
    assert store[5:2] == () and len(store[5:2]) == 0
    assert [x.name for x in store] == [x.name for x in layers]
    assert store.index(layers[4]) == 4 and layers[6] in store
    for bad in (7, -8):
        with pytest.raises(IndexError):
            store[bad]
    assert LayerStore.of(store, LAYER_CODEC) is store


def test_equality() -> None:
    layers = [_layer(f"l{i}", i) for i in range(4)]
    store = LayerStore.of(layers, LAYER_CODEC)
    assert store == tuple(layers) and tuple(layers) == store
    assert store == layers and store == LayerStore.of(tuple(layers), LAYER_CODEC)
    assert store != tuple(layers[:3]) and store != [*layers[:3], _layer("other")]
    assert store != "abc" and store != 3 and store.__eq__("abc") is NotImplemented
    assert hash(store) == hash(tuple(layers))
    neg = LayerStore.of([replace(layers[0], min_q=-0.0)], LAYER_CODEC)
    assert neg == LayerStore.of([replace(layers[0], min_q=0.0)], LAYER_CODEC)  # values, not bytes


def _report(layers: Any) -> RatioReport:
    return RatioReport(source="d.npz", raw=False, delta=0.01, min_ratio=7.0, top_k=5, layers=layers)


def test_report_converts_any_sequence_and_compares_equal() -> None:
    layers = [_layer(f"l{i}", i, violations=i % 2) for i in range(5)]
    from_list, from_tuple = _report(layers), _report(tuple(layers))
    assert isinstance(from_list.layers, LayerStore)
    assert from_list == from_tuple == _report(from_list.layers)
    assert from_list.layers == tuple(layers)
    assert from_list != _report(layers[:4])
    assert replace(from_list, layers=layers[:2]).layers == tuple(layers[:2])


class _Counting(LayerCodec):
    """The layer codec, counting top-level decodes."""

    def __init__(self) -> None:
        self.decoded = 0

    def decode(self, d: tuple[Any, ...]) -> LayerResult:
        self.decoded += 1
        return super().decode(d)


def test_totals_are_folded_once() -> None:
    layers = [
        replace(_layer(f"l{i}", i, violations=i % 3), nan_count=i % 2, count=10 + i)
        for i in range(30)
    ]
    codec = _Counting()
    builder: LayerStoreBuilder[LayerResult] = LayerStoreBuilder(codec)
    for layer in layers:
        builder.append(layer)
    report = _report(builder.build())
    for _ in range(3):
        assert report.count == sum(x.count for x in layers)
        assert report.violations == sum(x.violations for x in layers)
        assert report.nonfinite == sum(x.nonfinite for x in layers)
        assert report.below_bound == sum(x.below_bound for x in layers)
        assert report.violation_fraction == report.violations / report.count
    assert codec.decoded == 0  # no layer decoded for any total
    affected = tuple(x.name for x in layers if x.violations)
    assert report.layers_affected == affected and report.layers_affected == affected
    assert codec.decoded == len(affected)  # only the affected layers, once
    empty = _report(())
    assert (empty.count, empty.violations, empty.violation_fraction, empty.layers_affected) == (
        0,
        0,
        0.0,
        (),
    )


def test_compare_totals() -> None:
    layers = [
        _compare_layer("a", 2, 0.5),
        _compare_layer("b", 0, None),
        _compare_layer("c", 1, 3.0),
    ]
    report = CompareReport(
        source="d.npz",
        raw=False,
        spec_from=layers[0].spec_from,
        spec_to=layers[0].spec_to,
        tolerance=0.01,
        scale=1.0,
        top_k=5,
        layers=layers,
    )
    assert report.moved == 3 and report.max_abs_change == 3.0
    assert report.violations == sum(x.violations for x in layers)
    assert report.nonfinite == sum(x.nonfinite for x in layers)
    assert replace(report, layers=layers[1:2]).max_abs_change is None
    assert [_bits(x) for x in report.layers] == [_bits(x) for x in layers]  # NaN inside


def _many(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "many.npz"
    q = np.array([1e-9, 1.0, 2.0], np.float32)
    np.savez(path, **{f"model.layers.{i}.input_layernorm": q for i in range(n)})
    return path


def test_report_memory_per_layer(tmp_path: Path) -> None:
    """A report of many tiny layers costs well under 500 bytes per layer (the dataclass
    objects cost ~1.7 KB); measured with tracemalloc on the retained result."""
    n = 2000
    path = _many(tmp_path, n)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        report = analyze_dump(path, 1e-5)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(report.layers) == n and report.violations == n
    assert retained / n < 450, retained / n
    assert report.layers.nbytes / n < 400  # type: ignore[attr-defined]


def test_analyze_and_compare_fill_a_store(tmp_path: Path) -> None:
    path = _many(tmp_path, 5)
    ratio = analyze_dump(path, 1e-5)
    assert isinstance(ratio.layers, LayerStore) and ratio.below_bound == 5
    assert ratio.members_analysed == 5
    comp = compare_dump(path, "eps=1e-5", "eps=1e-6")
    assert isinstance(comp.layers, LayerStore) and len(comp.layers) == 5
    assert comp.moved == sum(x.moved for x in comp.layers)


def test_consume_layers_releases_sources_and_skips() -> None:
    class Src:
        def __init__(self, name: str) -> None:
            self.name = name

    def fn(src: Src) -> str:
        if src.name == "bad":
            raise InputFileError("f", "broken", key=src.name)
        return src.name.upper()

    sources: list[Any] = [Src("a"), Src("bad"), Src("c")]
    skipped: list[Any] = []
    got = consume_layers(sources, fn, skipped, skip_unreadable=True)
    assert next(got)[1] == "A" and sources == []  # the caller's list no longer holds them
    assert [r for _, r in got] == ["C"]
    assert [(u.name, u.problem) for u in skipped] == [("bad", "broken")]
    with pytest.raises(InputFileError):
        list(consume_layers([Src("bad")], fn, [], skip_unreadable=False))


def test_summary_chunks_are_the_whole_document() -> None:
    layers = [_layer(name, i) for i, name in enumerate(HOSTILE_NAMES * 3)]
    layers[1] = replace(layers[1], first_token=layers[2], other_tokens=layers[3])
    for report in (_report(layers), _report(layers[:1]), _report(())):
        whole = json_text(json.dumps(summary_document(report), indent=1, allow_nan=False)) + "\n"
        assert "".join(summary_chunks(report)) == whole


def _old_worst(report: RatioReport, k: int) -> tuple[LayerResult, ...]:
    """The ranking as a full sort (what worst_layers computes in one bounded pass)."""
    ly = report.layers
    ranked = sorted(
        range(len(ly)),
        key=lambda i: (
            -ly[i].violations,
            ly[i].min_ratio is None,
            ly[i].min_ratio if ly[i].min_ratio is not None else 0.0,
            i,
        ),
    )
    return tuple(ly[i] for i in sorted(ranked[:k]))


def test_plot_ranking_matches_a_full_sort() -> None:
    rng = np.random.default_rng(5)
    layers = [
        replace(
            _layer(f"l{i}", violations=int(rng.integers(0, 3))),
            min_ratio=None if rng.random() < 0.2 else float(rng.choice([1.0, 2.0, 0.5])),
        )
        for i in range(60)
    ]
    report = _report(layers)
    for k in (1, 5, 17, 59, 60, 100):
        assert tuple(worst_layers(report, k)) == _old_worst(report, k)
    comp = [
        _compare_layer(f"c{i}", int(rng.integers(0, 3)), [None, 0.5, 1.0][i % 3]) for i in range(20)
    ]
    creport = CompareReport(
        source="d",
        raw=False,
        spec_from=comp[0].spec_from,
        spec_to=comp[0].spec_to,
        tolerance=0.01,
        scale=1.0,
        top_k=5,
        layers=comp,
    )
    want = sorted(
        range(20),
        key=lambda i: (
            -comp[i].violations,
            comp[i].max_abs_change is None,
            -(comp[i].max_abs_change or 0.0),
            i,
        ),
    )[:7]
    got = worst_compare_layers(creport, 7)
    assert [_bits(x) for x in got] == [_bits(comp[i]) for i in sorted(want)]
