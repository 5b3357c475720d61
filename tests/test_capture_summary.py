"""Summary-only capture, merging, distributed reduction, the dump format and ratio's split."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rmsnorm_eps.analysis import RatioReport, analyze_dump  # noqa: E402
from rmsnorm_eps.capture.distributed import reduce_across_ranks  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.output import config_document, write_dump  # noqa: E402
from rmsnorm_eps.capture.report import summary_report  # noqa: E402
from rmsnorm_eps.errors import InputFileError  # noqa: E402
from rmsnorm_eps.merge import merge_reports, write_summary  # noqa: E402
from rmsnorm_eps.reports.document import document  # noqa: E402
from tests.helpers import tiny_llama, tiny_qwen3  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RATIO = 49.25125628140703


def _batches() -> list[tuple[object, object]]:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 64, (4, 6), generator=g)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 6, [1] * 2 + [0] * 4])
    return [(ids[:2], mask[:2]), (ids[2:], mask[2:])]


def _capture(model: object, batches: list, summary_only: bool) -> object:
    with (
        QCapture(
            model, summary_only=summary_only, min_ratio=RATIO if summary_only else None, top_k=3
        ) as cap,
        torch.no_grad(),
    ):
        for ids, mask in batches:
            model(input_ids=ids, attention_mask=mask)  # type: ignore[operator]
    return cap.result()


def _figures(report: RatioReport) -> list[dict]:
    """Every per-layer figure of a report's JSON document (counts, min/max, worst inputs with
    their indices, nonfinite examples, decade histogram, the first/other split), without what
    differs by construction (the shard fields of a merged report)."""
    return _strip_shards(json.loads(json.dumps(document(report)["layers"])))


def _strip_shards(layers: list[dict]) -> list[dict]:
    for layer in layers:
        for part in (layer, layer.get("first_token", {}), layer.get("other_tokens", {})):
            for item in part.get("worst", []) + part.get("nonfinite_examples", []):
                item.pop("shard", None)
                item.pop("shard_index", None)
    return layers


def _summary_file(tmp: Path, name: str, batches: list, model: object | None = None) -> Path:
    res = _capture(model or tiny_llama(), batches, True)
    path = tmp / name
    write_summary(summary_report(res, 0.01, str(path)), path)
    return path


@pytest.mark.parametrize("make", [tiny_llama, tiny_qwen3], ids=["llama", "qwen3-per-head"])
def test_summary_only_then_merge_equals_ratio_on_the_full_dump(
    tmp_path: Path, cli: object, make: object
) -> None:
    model = make()  # type: ignore[operator]
    dump = tmp_path / "q.npz"
    full = _capture(model, _batches(), False)
    write_dump(full, dump)
    eps = {m.name: m.eps for m in full.modules}
    whole = analyze_dump(dump, eps, top_k=3)
    summ = _summary_file(tmp_path, "s.json", _batches(), model)
    assert json.loads(summ.read_text())["schema"] == "rmsnorm-eps-summary"
    r = cli("merge", str(summ), "--format", "json")  # type: ignore[operator]
    assert r.exit_code == (1 if whole.violations else 0), r.stderr
    expected = _figures(whole)
    assert _strip_shards(json.loads(r.stdout)["layers"]) == expected
    # the figures are not vacuous: 4 first tokens and 14 others (times the heads of q/k norms)
    assert {ly["count"] for ly in expected} == ({18, 72, 36} if make is tiny_qwen3 else {18})
    for ly in expected:
        assert ly["first_token"]["count"] * 14 == ly["other_tokens"]["count"] * 4
        assert sum(d["count"] for d in ly["decades"]) == ly["count"] and len(ly["worst"]) == 3


def test_merge_of_two_capture_runs_equals_one_run(tmp_path: Path, cli: object) -> None:
    """Two summary-only runs over consecutive batches merge into the report of one run (and of
    ratio on its full dump): q arrays concatenate along axis 0, call after call."""
    model = tiny_llama()
    parts = [_summary_file(tmp_path, f"s{i}.json", [b], model) for i, b in enumerate(_batches())]
    one = _summary_file(tmp_path, "one.json", _batches(), model)
    r2 = cli("merge", str(parts[0]), str(parts[1]), "--format", "json")  # type: ignore[operator]
    r1 = cli("merge", str(one), "--format", "json")  # type: ignore[operator]
    assert r1.exit_code == r2.exit_code == 1, r2.stderr  # random weights: violations
    two = _strip_shards(json.loads(r2.stdout)["layers"])
    assert two == _strip_shards(json.loads(r1.stdout)["layers"])
    assert two[0]["count"] == 18 and two[0]["first_token"]["count"] == 4
    # in memory (what reduce_across_ranks does after gathering): the same report
    reports = [
        summary_report(_capture(model, [b], True), 0.01, f"part{i}")
        for i, b in enumerate(_batches())
    ]
    merged = merge_reports(reports, ["rank0", "rank1"])
    assert merged.shards == ("part0", "part1")
    whole = summary_report(_capture(model, _batches(), True), 0.01, "whole")
    assert _figures(merged) == _figures(whole)
    assert reduce_across_ranks(whole) is whole  # no process group: unchanged


def test_summary_only_holds_what_the_dump_would(tmp_path: Path) -> None:
    """The summary folds q as the dump stores it (float32), so its minimum is bit-equal."""
    model = tiny_llama()
    full = _capture(model, _batches(), False)
    rep = summary_report(_capture(model, _batches(), True), 0.01, "s")
    for m, layer in zip(full.modules, rep.layers, strict=True):
        q32 = m.q.astype(np.float32).astype(np.float64)
        assert layer.name == m.name and layer.dtype == "float32" and layer.shape == (18,)
        assert layer.min_q == q32.min() and layer.max_q == q32.max()
        assert layer.first_token.min_q == q32[m.position == 0].min()
        w = layer.worst[0]
        assert q32[w.index[0]] == w.q and w.q == q32.min()


def test_dump_with_positions_and_ratio_split(tmp_path: Path) -> None:
    model = tiny_llama()
    res = _capture(model, _batches(), False)
    out = tmp_path / "d.npz"
    write_dump(res, out)
    with np.load(out) as z:
        name = "model.layers.0.input_layernorm"
        assert z[name].dtype == np.float32 and z[name + "::position"].dtype == np.int64
        assert z[name + "::position"].tolist()[:10] == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3]
    rep = analyze_dump(out, 1e-5)
    layer = rep.layers[0]
    assert layer.first_token.count == 4 and layer.other_tokens.count == 14
    q = res.modules[0].q.astype(np.float32).astype(np.float64)
    pos = res.modules[0].position
    assert layer.first_token.min_q == q[pos == 0].min()
    assert layer.other_tokens.max_q == q[pos > 0].max()
    # worst indices of the split are indices of the whole layer
    for w in layer.first_token.worst:
        assert pos[w.index[0]] == 0 and q[w.index[0]] == w.q


def test_companion_errors(tmp_path: Path, write_npz: object) -> None:
    q = np.ones(3, np.float32)
    bad = write_npz("a.npz", **{"L": q, "M::position": np.zeros(3, np.int64)})  # type: ignore[operator]
    with pytest.raises(InputFileError, match=r"a\.npz \[M::position\]: companion array without"):
        analyze_dump(bad, 1e-5)
    bad = write_npz("b.npz", **{"L": q, "L::position": np.zeros(2, np.int64)})  # type: ignore[operator]
    with pytest.raises(InputFileError, match=r"b\.npz \[L::position\].*shape \(2,\)"):
        analyze_dump(bad, 1e-5)
    bad = write_npz("c.npz", **{"L": q, "L::position": np.zeros(3, np.float32)})  # type: ignore[operator]
    with pytest.raises(InputFileError, match="integer dtype"):
        analyze_dump(bad, 1e-5)
    bad = write_npz("d.npz", **{"L": np.zeros(3, np.int64)})  # type: ignore[operator]
    with pytest.raises(InputFileError, match="unsupported dtype int64"):
        analyze_dump(bad, 1e-5)


def test_config_document_structure() -> None:
    import yaml

    res = _capture(tiny_llama(), _batches(), False)
    doc = yaml.safe_load(yaml.safe_dump(config_document(res, "tiny", "test")))
    assert doc["schema_version"] == 1 and doc["model"] == "tiny"
    assert doc["defaults"] == {
        "eps": 1e-5,
        "placement": "inside",
        "gain": "w",
        "gain_baked": False,
        "reduction_dtype": "float32",
        "weight_after_cast": True,
        "dim": 32,
        "norm": "rms",
    }
    assert next(iter(doc["layers"])) == "model.layers.0.input_layernorm"
    assert doc["layers"]["model.norm"] == {"eps": 1e-5, "dim": 32}


_WORKER = r"""
import json, os, sys, torch, torch.distributed as dist
sys.path.insert(0, os.environ["ROOT"])
from tests.helpers import tiny_llama
from tests.test_capture_summary import _batches, _capture
from rmsnorm_eps.capture.distributed import write_reduced_summary
from rmsnorm_eps.capture.report import summary_report
dist.init_process_group("gloo", rank=int(sys.argv[1]), world_size=2,
                        init_method="tcp://127.0.0.1:" + sys.argv[2])
rank = dist.get_rank()
mine = summary_report(_capture(tiny_llama(), [_batches()[rank]], True), 0.01, f"part{rank}")
# every rank passes the same path; only rank 0 writes it
res = write_reduced_summary(mine, sys.argv[3])
assert res.layers[0].count == 18, res.layers[0].count  # every rank holds the merged report
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
# Leave without running C++ static destructors: at interpreter exit gloo's background threads
# can abort the process ("terminate called without an active exception") after all the work
# is done, which would fail the rank for nothing.
os._exit(0)
"""


def _run_two_ranks(out: Path) -> tuple[bool, str]:
    """Start the two gloo ranks on a fresh loopback port; (ok, stderr of a failed rank)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    # GLOO_SOCKET_IFNAME=lo: gloo otherwise picks the interface the hostname resolves to.
    env = dict(os.environ, ROOT=str(ROOT), PYTHONPATH=str(ROOT), GLOO_SOCKET_IFNAME="lo")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(r), port, str(out)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    errors = []
    for p in procs:
        # a bound on a hang, not a measurement: each rank imports torch and builds the model,
        # which took over 300 s with ~9 busy processes on 2 cores
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            errors.append(err)
    return not errors, "\n".join(errors)


@pytest.mark.slow
def test_distributed_gloo_two_processes_equals_one_process(tmp_path: Path, cli: object) -> None:
    out = tmp_path / "reduced.json"
    # The rendezvous port is chosen by binding and releasing it, so another process can take
    # it in between, and a loaded machine can time a connection out; gloo itself has aborted a
    # rank once in CI ("terminate called without an active exception", a C++ abort inside
    # torch). Such a run is retried (at most twice) on a new port. An assertion or Python
    # error inside the reduction is never retried.
    transient_signs = (
        "Address already in use",
        "Connection",
        "Timeout",
        "timed out",
        "terminate called",
    )
    for _attempt in range(3):
        ok, err = _run_two_ranks(out)
        transient = "Traceback" not in err and any(text in err for text in transient_signs)
        if ok or not transient:
            break
    assert ok, err
    single = _summary_file(tmp_path, "single.json", _batches())
    docs = []
    for path in (out, single):
        r = cli("merge", str(path), "--format", "json")  # type: ignore[operator]
        assert r.exit_code == 1, r.stderr  # random weights: violations
        docs.append(_strip_shards(json.loads(r.stdout)["layers"]))
    assert docs[0] == docs[1] and docs[0][0]["count"] == 18


def test_write_reduced_summary_without_a_process_group_writes_this_process(
    tmp_path: Path,
) -> None:
    from rmsnorm_eps.capture.distributed import write_reduced_summary
    from rmsnorm_eps.merge import load_summary

    res = _capture(tiny_llama(), _batches(), True)
    report = summary_report(res, 0.01, "one process")
    out = tmp_path / "s.json"
    assert write_reduced_summary(report, out) is report  # nothing to reduce: unchanged
    again = load_summary(out)
    assert [ly.count for ly in again.layers] == [ly.count for ly in report.layers]
    assert [ly.min_q for ly in again.layers] == [ly.min_q for ly in report.layers]


def test_summary_only_keeps_a_layernorm_v_through_merge(tmp_path: Path, cli: object) -> None:
    """A LayerNorm module's summary holds v (its variance), and merge reports v, not q
    (summary version 2 had no quantity: merge called a LayerNorm's v q)."""
    model = tiny_llama()
    model.model.norm = torch.nn.LayerNorm(32, eps=3e-5)  # type: ignore[attr-defined]
    rep = summary_report(_capture(model, _batches(), True), 0.01, "s")
    kinds = {layer.name: layer.quantity for layer in rep.layers}
    assert kinds["model.norm"] == "v" and kinds["model.layers.0.input_layernorm"] == "q"
    ln = next(layer for layer in rep.layers if layer.name == "model.norm")
    assert ln.first_token is not None and ln.first_token.quantity == "v"
    path = tmp_path / "s.json"
    write_summary(rep, path)
    saved = {ly["name"]: ly["quantity"] for ly in json.loads(path.read_text())["layers"]}
    assert saved["model.norm"] == "v" and saved["model.layers.1.input_layernorm"] == "q"
    r = cli("merge", str(path), "--format", "json")  # type: ignore[operator]
    merged = {ly["name"]: ly for ly in json.loads(r.stdout)["layers"]}
    assert merged["model.norm"]["quantity"] == "v"
    assert merged["model.norm"]["first_token"]["quantity"] == "v"
    assert merged["model.layers.0.input_layernorm"]["quantity"] == "q"
