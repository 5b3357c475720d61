"""The small q dump used by the compare tests and docs/compare.md (a stand-in for
examples/q_dump.npz): three layers of q values of a model with eps 1e-5, shape (2, 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

LAYERS: dict[str, list[list[float]]] = {
    "layers.0.input_layernorm": [[3e-4, 2e-3, 1.5e-2, 0.4], [2.5, 8e-5, 6e-4, 1.0]],
    "layers.1.post_norm": [[0.9, 1.2, 0.05, 3.0], [0.02, 0.7, 4.0, 11.0]],
    "norm": [[12.0, 40.0, 9.5, 300.0], [18.0, 22.0, 75.0, 5.5]],
}


def write_q_dump(path: Path) -> Path:
    np.savez(path, **{k: np.array(v, np.float32) for k, v in LAYERS.items()})
    return path
