"""Mergeable summaries: merge(split(x)) gives exactly the report of x."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmsnorm_eps.analysis import RatioReport, analyze_dump
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.merge import load_summary, merge_summaries, summary_document, write_summary
from rmsnorm_eps.reports.document import document
from rmsnorm_eps.reports.schema import load_schema


def _plain(report: RatioReport, names: bool = True) -> dict[str, Any]:
    """The report's document without what differs by construction (source, shard fields;
    with ``names=False`` also the layer names, which are file stems for .npy shards)."""
    doc = document(report)
    for key in ("source", "shards", "command"):
        doc.pop(key, None)
    doc["summary"].pop("members", None)  # a file's entries: a merged report has no file
    if not names:
        doc["summary"].pop("layers_affected")
    for layer in doc["layers"]:
        if not names:
            layer.pop("name")
        for part in (layer, layer.get("first_token", {}), layer.get("other_tokens", {})):
            for item in part.get("worst", []) + part.get("nonfinite_examples", []):
                item.pop("shard", None)
                item.pop("shard_index", None)
    return doc


def _data(seed: int, rows: int, cols: int, raw: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * 10 ** rng.uniform(-5, 1, (rows, 1))
    if not raw:
        x = x * x
    flat = x.reshape(-1)
    for _ in range(int(rng.integers(0, 4))):
        flat[rng.integers(0, flat.size)] = rng.choice([np.nan, np.inf, 0.0])
    # duplicates: ties in the worst-k lists across shards
    flat[rng.integers(0, flat.size, 3)] = flat[0]
    return x.astype(np.float32)


def _split_and_merge(
    tmp: Path, x: np.ndarray, cuts: list[int], raw: bool, top: int, **merge_kw: Any
) -> tuple[RatioReport, list[int]]:
    bounds = [0, *cuts, x.shape[0]]
    paths = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        shard = tmp / f"shard{i}.npy"
        np.save(shard, x[a:b])
        report = analyze_dump(shard, 1e-5, raw=raw, top_k=top)
        out = tmp / f"s{i}.json"
        write_summary(report, out)
        paths.append(out)
    return merge_summaries(paths, **merge_kw), bounds[:-1]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(2, 60),
    raw=st.booleans(),
    top=st.integers(0, 6),
    data=st.data(),
)
def test_merge_of_split_equals_analysis(
    tmp_path: Path, seed: int, rows: int, raw: bool, top: int, data: st.DataObject
) -> None:
    x = _data(seed, rows, 5, raw)
    cuts = sorted(data.draw(st.lists(st.integers(1, rows - 1), max_size=4, unique=True)))
    (tmp_path / "all.npy").unlink(missing_ok=True)
    np.save(tmp_path / "all.npy", x)
    whole = analyze_dump(tmp_path / "all.npy", 1e-5, raw=raw, top_k=top)
    merged, offsets = _split_and_merge(tmp_path, x, cuts, raw, top)
    assert _plain(merged, names=False) == _plain(whole, names=False)
    assert len(merged.shards) == len(cuts) + 1
    for layer in merged.layers:
        for w in layer.worst:
            assert w.shard is not None and w.shard_index is not None
            assert w.index[0] == offsets[w.shard] + w.shard_index[0]
            assert w.index[1:] == w.shard_index[1:]


def test_merge_npz_layers_by_name(tmp_path: Path) -> None:
    a = _data(1, 30, 4, False)
    b = _data(2, 30, 4, False)
    np.savez(tmp_path / "all.npz", l0=a, l1=b)
    np.savez(tmp_path / "r0.npz", l0=a[:7], l1=b[:11])  # layers in the first shard's order
    np.savez(tmp_path / "r1.npz", l1=b[11:], l0=a[7:])
    whole = analyze_dump(tmp_path / "all.npz", 1e-5, top_k=3)
    for i in (0, 1):
        write_summary(analyze_dump(tmp_path / f"r{i}.npz", 1e-5, top_k=3), tmp_path / f"{i}.json")
    merged = merge_summaries([tmp_path / "0.json", tmp_path / "1.json"])
    assert _plain(merged) == _plain(whole)


@pytest.mark.parametrize("top", [5, 1])
def test_merge_at_another_delta_when_the_summaries_determine_it(tmp_path: Path, top: int) -> None:
    # q/eps = 1e-4, 2e-4, 0.05, 300, 400, 500; delta 0.3 <=> q/eps >= 0.96 (decade [0.1, 1))
    x = np.array([1e-9, 2e-9, 5e-7, 3e-3, 4e-3, 5e-3], np.float32)
    np.save(tmp_path / "all.npy", x)
    # top 5: each worst list holds every value; top 1: the decades around 0.96 are empty
    merged, _ = _split_and_merge(tmp_path, x, [2], False, top, delta=0.3)
    whole = analyze_dump(tmp_path / "all.npy", 1e-5, delta=0.3, top_k=top)
    assert merged.below_bound == whole.below_bound == 3
    assert _plain(merged, names=False) == _plain(whole, names=False)


def test_merge_refuses_an_undetermined_count(tmp_path: Path, cli: Callable[..., Any]) -> None:
    rng = np.random.default_rng(0)
    x = (10 ** rng.uniform(-5, -2, 400)).astype(np.float32)  # every decade around 49 is full
    _split_and_merge(tmp_path, x, [200], False, 2)
    res = cli("merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json"), "--delta", "0.05")
    assert res.exit_code == 2
    assert "cannot merge layer" in res.stderr and "rerun" in res.stderr


def test_cli_save_summary_and_merge(tmp_path: Path, cli: Callable[..., Any]) -> None:
    x = _data(5, 40, 8, True)
    np.save(tmp_path / "a.npy", x[:25])
    np.save(tmp_path / "b.npy", x[25:])
    np.save(tmp_path / "all.npy", x)
    for name in ("a", "b"):
        res = cli(
            "ratio",
            "--eps",
            "1e-5",
            "-q",
            str(tmp_path / f"{name}.npy"),
            "--raw",
            "--save-summary",
            str(tmp_path / f"{name}.json"),
            "--exit-zero",
        )
        assert res.exit_code == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["schema"] == "rmsnorm-eps-summary" and doc["schema_version"] == 3
    merged = cli("merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-f", "json")
    whole = cli("ratio", "--eps", "1e-5", "-q", str(tmp_path / "all.npy"), "--raw", "-f", "json")
    assert merged.exit_code == whole.exit_code == 1
    m, w = json.loads(merged.stdout), json.loads(whole.stdout)
    assert m["command"] == "merge" and m["shards"] == [
        str(tmp_path / "a.npy"),
        str(tmp_path / "b.npy"),
    ]
    assert m["summary"]["layers_affected"] == ["a"]  # named after the first shard's file
    m["summary"].pop("layers_affected")
    w["summary"].pop("layers_affected")
    assert "members" not in m["summary"] and w["summary"].pop("members")["total"] >= 1
    assert m["summary"] == w["summary"] and m["gate"] == w["gate"]
    assert [e["index"] for e in m["layers"][0]["worst"]] == [
        e["index"] for e in w["layers"][0]["worst"]
    ]
    assert all("shard_index" in e for e in m["layers"][0]["worst"])
    text = cli("merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--exit-zero")
    assert text.exit_code == 0 and "(shard 1 [" in text.stdout
    budget = cli("merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--max-fraction", "1")
    assert budget.exit_code == 0
    top = cli("merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--top", "9")
    assert top.exit_code == 2 and "exceeds what the summaries kept (5" in top.stderr
    both = cli("merge", str(tmp_path / "a.json"), "--delta", "0.1", "--min-ratio", "3")
    assert both.exit_code == 2


def _summary(
    tmp_path: Path, eps: float = 1e-5, min_ratio: float | None = None, **change: Any
) -> Path:
    """A summary of q = 1, 2, 3 (made at ``eps`` and ``min_ratio``), then ``change`` applied."""
    np.save(tmp_path / "q.npy", np.array([1.0, 2.0, 3.0]))
    doc = summary_document(analyze_dump(tmp_path / "q.npy", eps, min_ratio=min_ratio))
    for key, value in change.items():
        if key.startswith("layer_"):
            doc["layers"][0][key[6:]] = value
        else:
            doc[key] = value
    out = tmp_path / f"bad{len(list(tmp_path.iterdir()))}.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": "other"}, "not an rmsnorm-eps summary"),
        ({"schema_version": 99}, "unsupported summary version 99"),
        ({"raw": "yes"}, "[raw]"),
        ({"layer_count": 7}, "does not match shape"),
        ({"layer_eps": "x"}, "expected a finite number"),
        ({"layer_worst": [{"index": [9, 9], "q": 1.0}]}, "index of 1 non-negative"),
        ({"layer_decades": [{"decade": 1, "count": -1}]}, "[layers[0].decades[0].count]"),
        ({"layers": []}, "non-empty list"),
    ],
)
def test_bad_summaries_exit_2(
    tmp_path: Path, cli: Callable[..., Any], change: dict[str, Any], message: str
) -> None:
    bad = _summary(tmp_path, **change)
    res = cli("merge", str(bad))
    assert res.exit_code == 2 and message in res.stderr, res.stderr
    with pytest.raises(InputFileError):
        load_summary(bad)


def test_incompatible_shards(tmp_path: Path, cli: Callable[..., Any]) -> None:
    good = _summary(tmp_path)
    other_eps = _summary(tmp_path, eps=1e-6)
    assert "differs" in cli("merge", str(good), str(other_eps)).stderr
    raw = _summary(tmp_path, raw=True)
    assert cli("merge", str(good), str(raw)).exit_code == 2
    np.save(tmp_path / "m.npy", np.ones((2, 3)))
    write_summary(analyze_dump(tmp_path / "m.npy", 1e-5), tmp_path / "m.json")
    np.save(tmp_path / "n.npy", np.ones((2, 4)))
    write_summary(analyze_dump(tmp_path / "n.npy", 1e-5), tmp_path / "n.json")
    res = cli("merge", str(tmp_path / "m.json"), str(tmp_path / "n.json"))
    assert res.exit_code == 2 and "every axis but the first" in res.stderr
    other_bound = _summary(tmp_path, min_ratio=3.0)
    res = cli("merge", str(good), str(other_bound))
    assert res.exit_code == 2 and "different bounds" in res.stderr
    (tmp_path / "junk.json").write_text("{")
    assert "not a JSON summary" in cli("merge", str(tmp_path / "junk.json")).stderr
    assert cli("merge", str(tmp_path / "missing.json")).exit_code == 2
    with pytest.raises(InvalidParameterError):
        merge_summaries([])


def test_readme_example(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """The example of docs/performance.md, with the figures it shows."""
    np.save(tmp_path / "rank0.npy", np.array([4e-4, 1e-3, 2e-7, 8e-3], np.float32))
    np.save(tmp_path / "rank1.npy", np.array([3e-4, np.nan, 5e-6, 2e-3], np.float32))
    for i in (0, 1):
        res = cli(
            "ratio",
            "--eps",
            "1e-5",
            "-q",
            str(tmp_path / f"rank{i}.npy"),
            "--top",
            "2",
            "--save-summary",
            str(tmp_path / f"s{i}.json"),
        )
        assert res.exit_code == 1
    s0, s1 = str(tmp_path / "s0.json"), str(tmp_path / "s1.json")
    res = cli("merge", s0, s1)
    assert res.exit_code == 1
    assert (
        "5 violation(s) in 1 of 1 layer(s) (4 below the bound, 1 nonfinite) out of 8" in res.stdout
    )
    assert "[2] (shard 0 [2])   2e-07    0.02" in res.stdout
    assert "[6] (shard 1 [2])   5e-06     0.5" in res.stdout
    assert "[5] (shard 1 [1])=nan" in res.stdout
    res = cli("merge", s0, s1, "--delta", "0.5")
    assert res.exit_code == 1 and "(1 below the bound, 1 nonfinite) out of 8" in res.stdout
    assert "(1 below q/eps 0.333333333333, 1 nonfinite)" in res.stderr
    res = cli("merge", s0, s1, "--delta", "0.001")
    assert res.exit_code == 2 and "q/eps >= 499.25012506253125" in res.stderr


def _with_positions(tmp: Path, name: str, q: np.ndarray, pos: np.ndarray) -> Path:
    path = tmp / name
    np.savez(path, L=q, **{"L::position": pos})
    return path


def test_merge_keeps_the_first_token_split(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """ratio --save-summary on a dump with positions keeps first_token/other_tokens; merging
    shards gives the split of the whole dump (indices of the whole layer)."""
    rng = np.random.default_rng(3)
    q = (10 ** rng.uniform(-6, -2, 40)).astype(np.float32)
    pos = np.tile(np.arange(8, dtype=np.int64), 5)  # 5 sequences of 8 tokens
    q[pos == 0] *= 1e-3  # first tokens: the smallest q
    whole = analyze_dump(_with_positions(tmp_path, "all.npz", q, pos), 1e-5, top_k=3)
    paths = []
    for i, (a, b) in enumerate([(0, 13), (13, 40)]):
        shard = _with_positions(tmp_path, f"r{i}.npz", q[a:b], pos[a:b])
        out = tmp_path / f"s{i}.json"
        res = cli(
            "ratio", "--eps", "1e-5", "-q", str(shard), "--top", "3", "--save-summary", str(out)
        )
        assert res.exit_code == 1, res.stderr
        assert json.loads(out.read_text())["layers"][0]["first_token"]["count"] == (
            2 if i == 0 else 3
        )
        paths.append(out)
    merged = merge_summaries(paths)
    assert _plain(merged) == _plain(whole)
    res = cli("merge", *map(str, paths), "--format", "json")
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema("merge")).validate(doc)
    assert doc["layers"][0]["first_token"]["worst"][0]["shard_index"] == [0]
    ft = merged.layers[0].first_token
    assert ft is not None and ft.count == 5 and ft.min_q == q[pos == 0].min()
    assert [w.index for w in ft.worst] == [
        (int(i),) for i in np.flatnonzero(pos == 0)[np.argsort(q[pos == 0], kind="stable")][:3]
    ]
    # a shard without positions: the merged layer has no split
    np.save(tmp_path / "plain.npy", q[:13])
    write_summary(analyze_dump(tmp_path / "plain.npy", 1e-5, top_k=3), tmp_path / "p.json")
    merged = merge_summaries([tmp_path / "p.json", paths[1]])
    assert merged.layers[0].first_token is None and merged.layers[0].count == 40


def test_split_fields_are_validated(tmp_path: Path) -> None:
    q = np.array([1e-3, 2e-3, 3e-3], np.float32)
    rep = analyze_dump(_with_positions(tmp_path, "a.npz", q, np.array([0, 1, 0])), 1e-5)
    doc = summary_document(rep)
    bad = json.loads(json.dumps(doc))
    del bad["layers"][0]["other_tokens"]
    (tmp_path / "b.json").write_text(json.dumps(bad))
    with pytest.raises(InputFileError, match=r"layers\[0\]\.first_token.*come together"):
        load_summary(tmp_path / "b.json")
    bad = json.loads(json.dumps(doc))
    bad["layers"][0]["first_token"]["count"] = 1
    (tmp_path / "c.json").write_text(json.dumps(bad))
    with pytest.raises(InputFileError, match=r"first_token 1 \+ other_tokens 1 != count 3"):
        load_summary(tmp_path / "c.json")
    bad = json.loads(json.dumps(doc))
    bad["layers"][0]["other_tokens"]["worst"][0]["q"] = "x"
    (tmp_path / "d.json").write_text(json.dumps(bad))
    with pytest.raises(InputFileError, match=r"layers\[0\]\.other_tokens\.worst\[0\]\.q"):
        load_summary(tmp_path / "d.json")


# ---------------------------------------------------------------- issue 21: contradictions


def _doc(tmp_path: Path, q: list[float], top_k: int = 5) -> dict[str, Any]:
    np.save(tmp_path / "c.npy", np.array(q, np.float64))
    return summary_document(analyze_dump(tmp_path / "c.npy", 1e-5, top_k=top_k))


def _refused(tmp_path: Path, doc: Any, message: str, text: str | None = None) -> None:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc) if text is None else text)
    with pytest.raises(InputFileError, match=message):
        load_summary(path)


def test_below_bound_contradicting_the_figures_is_refused(tmp_path: Path) -> None:
    """below_bound 0 while min_q, the worst list and the histogram lie below the bound:
    merging it would PASS a violating shard."""
    doc = _doc(tmp_path, [1e-9, 1.0, 2.0])
    assert doc["layers"][0]["below_bound"] == 1
    doc["layers"][0]["below_bound"] = 0
    _refused(tmp_path, doc, r"below_bound 0 contradicts .* \(they give 1 to 1\)")
    # also when the worst list is cut and only the histogram shows the violations
    many = _doc(tmp_path, [1e-9] * 8 + [1.0] * 4, top_k=2)
    many["layers"][0]["below_bound"] = 2
    _refused(tmp_path, many, r"below_bound 2 contradicts .* \(they give 8 to 8\)")


def test_worst_list_and_histogram_must_agree(tmp_path: Path) -> None:
    doc = _doc(tmp_path, [1e-9, 1.0, 2.0], top_k=2)
    doc["layers"][0]["worst"].append({"index": [2], "q": 2.0})  # longer than top_k
    _refused(tmp_path, doc, r"3 worst inputs listed; top_k 2 and 3 finite positive values give 2")
    doc = _doc(tmp_path, [1.0, 2.0, 3.0])
    for d in doc["layers"][0]["decades"]:
        d["decade"] += 1
    _refused(tmp_path, doc, "the decade histogram contradicts the layer's min_q or max_q")


def test_min_ratio_is_recomputed_from_delta(tmp_path: Path) -> None:
    doc = _doc(tmp_path, [1e-3, 1.0])
    doc["min_ratio"] = 1e-9  # would PASS q/eps = 100 against a bound of 49.25
    _refused(tmp_path, doc, r"min_ratio 1e-09 contradicts delta 0.01 \(which gives 49.25")
    np.save(tmp_path / "r.npy", np.array([1.0, 2.0]))
    custom = summary_document(analyze_dump(tmp_path / "r.npy", 1e-5, min_ratio=3.0))
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(custom))
    assert load_summary(path).min_ratio == 3.0  # --min-ratio: delta computed from it


def test_duplicate_keys_and_huge_numbers_are_refused(tmp_path: Path) -> None:
    doc = _doc(tmp_path, [1e-9, 1.0])
    text = json.dumps(doc)
    dup = text.replace('"below_bound": 1', '"below_bound": 1, "below_bound": 0')
    assert dup != text
    _refused(tmp_path, doc, "duplicate key 'below_bound'", dup)
    doc["layers"][0]["eps"] = 10**400
    _refused(tmp_path, doc, "expected a finite number, got an integer of 401 digits")


def test_merged_shape_beyond_int64_is_one_line(tmp_path: Path, cli: Callable[..., Any]) -> None:
    np.save(tmp_path / "s.npy", np.zeros((1, 1), np.float32))
    doc = summary_document(analyze_dump(tmp_path / "s.npy", 1e-5))
    layer = doc["layers"][0]
    big = 2**62
    layer.update(shape=[big], count=big, zero=big, decades=[], min_q=0.0, max_q=0.0)
    layer.update(worst=[], below_bound=0, min_pos_q=None)  # zero vectors: apart, not listed
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"s{i}.json")
        paths[-1].write_text(json.dumps(doc))
    load_summary(paths[0])
    res = cli("merge", *map(str, paths))
    assert res.exit_code == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "more than 9223372036854775807 values" in res.stderr


def test_shards_are_folded_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shard is released before the next is read (memory: one shard, whatever their
    number), and the merge equals the merge of all of them at once."""
    import gc
    import weakref

    from rmsnorm_eps.merge import combine

    paths = []
    for i in range(6):
        np.save(tmp_path / f"p{i}.npy", np.array([1e-9 * (i + 1), 1.0, 2.0 + i]))
        write_summary(analyze_dump(tmp_path / f"p{i}.npy", 1e-5), tmp_path / f"p{i}.json")
        paths.append(tmp_path / f"p{i}.json")
    alive: list[weakref.ref[Any]] = []
    real = combine.load_summary

    def tracked(p: Any) -> Any:
        gc.collect()
        assert all(r() is None for r in alive), "an earlier shard is still held"
        shard = real(p)
        alive.append(weakref.ref(shard))
        return shard

    monkeypatch.setattr(combine, "load_summary", tracked)
    merged = merge_summaries(list(paths))
    assert len(alive) == 6
    (layer,) = merged.layers
    assert layer.count == 18 and layer.below_bound == 6
    assert [w.shard for w in layer.worst] == [0, 1, 2, 3, 4]


def test_layernorm_v_survives_save_summary_and_merge(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """``ratio --raw --norm layer --save-summary`` then ``merge``: the merged report says v
    (the summary of version 2 had no quantity, and merge reported the same numbers as q)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 5, 16)) * 0.01 + 1.0).astype(np.float32)
    np.savez(tmp_path / "ln.npz", ln=x)
    res = cli(
        "ratio",
        str(tmp_path / "ln.npz"),
        "--eps",
        "1e-5",
        "--raw",
        "--norm",
        "layer",
        "--save-summary",
        str(tmp_path / "s0.json"),
        "-f",
        "json",
        "--exit-zero",
    )
    assert res.exit_code == 0, res.stderr
    ratio_layer = json.loads(res.stdout)["layers"][0]
    assert ratio_layer["quantity"] == "v"
    assert json.loads((tmp_path / "s0.json").read_text())["layers"][0]["quantity"] == "v"
    merged = cli("merge", str(tmp_path / "s0.json"), "-f", "json", "--exit-zero")
    assert merged.exit_code == 0, merged.stderr
    layer = json.loads(merged.stdout)["layers"][0]
    assert layer["quantity"] == "v" and layer["min_q"] == ratio_layer["min_q"]
    text = cli("merge", str(tmp_path / "s0.json"), "--exit-zero")
    assert "r = v/eps" in text.stdout
    # a q summary and a v summary of the same layer do not merge
    cli(
        "ratio",
        str(tmp_path / "ln.npz"),
        "--eps",
        "1e-5",
        "--raw",
        "--save-summary",
        str(tmp_path / "q0.json"),
        "--exit-zero",
    )
    mixed = cli("merge", str(tmp_path / "s0.json"), str(tmp_path / "q0.json"))
    assert mixed.exit_code == 2 and "quantity q differs from v" in mixed.stderr
