"""Write examples/configs/q_layers.npz: a q dump whose layer names match configs/qwen3-8b.yaml
and examples/configs/per-layer.yaml (and, on purpose, not configs/llama-3-8b.yaml, which has no
q_norm pattern).

Two layers, named as in transformers' Qwen3 module tree, each holding the same four q values
5e-5, 5e-4, 5e-3, 0.5 (float64): with eps 1e-5 q/eps is 5, 50, 500, 5e4 and the first input is
below the default bound q/eps >= 49.2512562814; with eps 1e-6 every input passes.
Deterministic (no randomness). From the repository root: ``python examples/configs/make_q_dump.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("q_layers.npz")
Q = np.array([5e-5, 5e-4, 5e-3, 0.5], np.float64)
LAYERS = ("model.layers.0.input_layernorm", "model.layers.0.self_attn.q_norm")


def write(path: Path = OUT) -> Path:
    """Write the dump to ``path``."""
    np.savez(path, **{name: Q for name in LAYERS})
    return path


if __name__ == "__main__":
    print(write())
