"""rmsnorm_eps.capture.distributed: the ranks' summaries reduced one rank at a time (each made
when asked for, the previous one released), equal to merging them all; merge_summaries takes
an iterator (the 2-process gloo run is tests/test_capture_summary.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump

pytest.importorskip("torch")


def _rank_payloads(tmp_path: Path, n: int) -> list[bytes]:
    """Summary documents of ``n`` ranks over parts of one q array (rank 1 ran no sample)."""
    import json

    from rmsnorm_eps.merge import summary_document

    rng = np.random.default_rng(5)
    out: list[bytes] = []
    for r in range(n):
        if r == 1:
            out.append(b"")
            continue
        np.save(tmp_path / "part.npy", rng.uniform(1e-9, 1e-3, size=50).astype(np.float32))
        rep = analyze_dump(tmp_path / "part.npy", 1e-6, top_k=3)
        out.append(json.dumps(summary_document(rep), allow_nan=False).encode())
    return out


def test_distributed_reduction_folds_one_rank_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reduce_summary takes the ranks' documents one at a time (each made when asked for, the
    previous one already released) and gives the merge of them all."""
    import gc
    import warnings

    import torch.distributed as dist

    from rmsnorm_eps.capture import distributed
    from rmsnorm_eps.merge import merge_summaries, summary_from_document
    from rmsnorm_eps.merge.summary_format import ShardSummary, parse_summary_json

    payloads = _rank_payloads(tmp_path, 5)
    asked: list[int] = []

    def held() -> int:
        """Shard summaries alive with their layers (the merge keeps only the first's head)."""
        gc.collect()
        # type(o), not isinstance(o, ...): isinstance looks through a weakref.proxy, which
        # raises ReferenceError when its object is gone (seen once in CI)
        with warnings.catch_warnings():  # touching every object can touch deprecated names
            warnings.simplefilter("ignore")
            return sum(
                1 for o in gc.get_objects() if issubclass(type(o), ShardSummary) and o.layers
            )

    def in_turn(data: bytes, group: Any = None) -> Any:
        for p in payloads:
            assert held() == 0, "an earlier rank's summary is still held"
            asked.append(len(p))
            yield p

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed, "bytes_in_turn", in_turn)
    report = distributed.reduce_summary(None, "whole")
    shards = [
        summary_from_document(parse_summary_json(p), f"rank{r}")
        for r, p in enumerate(payloads)
        if p
    ]
    expected = merge_summaries(shards)
    assert len(asked) == 5
    assert report.source == "whole" and report.shards == ()
    assert [ly.count for ly in report.layers] == [200]
    assert report.layers[0].min_q == expected.layers[0].min_q
    assert report.layers[0].below_bound == expected.layers[0].below_bound
    assert [w.index for w in report.layers[0].worst] == [w.index for w in expected.layers[0].worst]


def test_merge_summaries_takes_an_iterator_and_refuses_an_empty_one(tmp_path: Path) -> None:
    from rmsnorm_eps.errors import InvalidParameterError
    from rmsnorm_eps.merge import merge_summaries

    with pytest.raises(InvalidParameterError, match="at least one summary"):
        merge_summaries(iter([]))
