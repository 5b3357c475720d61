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

from rmsnorm_eps.analysis import analyze_dump  # noqa: E402
from rmsnorm_eps.capture.distributed import merge_results  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.output import config_document, write_dump  # noqa: E402
from rmsnorm_eps.capture.summaries import summary_from_dict, summary_to_dict  # noqa: E402
from rmsnorm_eps.errors import InputFileError  # noqa: E402
from rmsnorm_eps.summary import LayerAccumulator  # noqa: E402
from tests.test_capture_hooks import tiny_llama  # noqa: E402

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


def _stats(acc: LayerAccumulator) -> tuple:
    return (
        acc.count,
        acc.below,
        acc.min_q,
        acc.min_index,
        acc.max_q,
        sorted(acc.decades.items()),
        acc.worst_q.tolist(),
        acc.worst_index.tolist(),
    )


def test_summary_equals_statistics_of_full_dump_and_merge_of_halves() -> None:
    model = tiny_llama()
    full = _capture(model, _batches(), False)
    summ = _capture(model, _batches(), True)
    halves = [_capture(model, [b], True) for b in _batches()]
    merged = merge_results(halves)
    for f, s, mm in zip(full.modules, summ.modules, merged.modules, strict=True):
        ref = LayerAccumulator(f.eps, RATIO, 3)
        ref.update(f.q, 0)
        assert _stats(s.summaries["all"].acc) == _stats(ref)
        assert _stats(mm.summaries["all"].acc) == _stats(ref)
        first = f.position == 0
        ref_first = LayerAccumulator(f.eps, RATIO, 3)
        ref_first.update(f.q[first], 0)
        assert _stats(mm.summaries["first"].acc) == _stats(ref_first)
        # the origin of the minimum is remembered: (batch, position, head) of the full dump
        i = ref.min_index
        assert s.summaries["all"].where[i] == (int(f.batch[i]), int(f.position[i]), 0)
        assert mm.summaries["all"].where == s.summaries["all"].where
    assert merged.sequences == 4 and merged.tokens == 18
    rt = summary_from_dict(
        json.loads(json.dumps(summary_to_dict(summ.modules[0].summaries["all"])))
    )
    assert _stats(rt.acc) == _stats(summ.modules[0].summaries["all"].acc)


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
from tests.test_capture_hooks import tiny_llama
from tests.test_capture_summary import _batches, _capture
from rmsnorm_eps.capture.distributed import reduce_across_ranks
from rmsnorm_eps.capture.summaries import summary_to_dict
dist.init_process_group("gloo", rank=int(sys.argv[1]), world_size=2,
                        init_method="tcp://127.0.0.1:" + sys.argv[2])
rank = dist.get_rank()
res = reduce_across_ranks(_capture(tiny_llama(), [_batches()[rank]], True))
if rank == 0:
    json.dump({m.name: summary_to_dict(m.summaries["all"]) for m in res.modules},
              open(sys.argv[3], "w"))
dist.destroy_process_group()
"""


def test_distributed_gloo_two_processes_equals_one_process(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = tmp_path / "reduced.json"
    env = dict(os.environ, ROOT=str(ROOT), PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(r), port, str(out)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    reduced = json.loads(out.read_text())
    single = _capture(tiny_llama(), _batches(), True)
    for m in single.modules:
        assert reduced[m.name] == json.loads(json.dumps(summary_to_dict(m.summaries["all"])))
