"""rmsnorm_eps.parity.probe_set: a probe set's shape figures, rows per category and metadata."""

from __future__ import annotations

import numpy as np

from rmsnorm_eps.parity.probe_set import CATEGORIES
from rmsnorm_eps.parity.probes import make_probes


def test_dim_count_rows_and_metadata() -> None:
    p = make_probes(16, 1e-6, seed=2)
    assert (p.dim, p.count) == (16, p.inputs.shape[0])
    meta = p.metadata()
    assert (meta["eps"], meta["seed"], meta["dtype"], meta["dim"]) == (1e-6, 2, "float32", 16)
    rows = [p.rows(name) for name in CATEGORIES]
    assert sorted(np.concatenate(rows).tolist()) == list(range(p.count))  # a partition
    for i, name in enumerate(CATEGORIES):
        np.testing.assert_array_equal(p.rows(name), np.flatnonzero(p.category == i))
