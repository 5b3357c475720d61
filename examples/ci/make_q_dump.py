"""Write examples/ci/q_dump.npz: a small, deterministic q dump for the CI examples and tests.

Three layers of q = mean(x^2) values (float32, shape (4 sequences, 16 tokens)), named like
GGUF tensors. With eps = 1e-5 and the default bound (delta = 0.01, q/eps >= 49.2512562814):
``layers.0.attn_norm`` has inputs below the bound, ``layers.0.ffn_norm`` has none, and
``output_norm`` holds one NaN. Run from the repository root: ``python examples/ci/make_q_dump.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def q_arrays() -> dict[str, np.ndarray]:
    """The arrays, from a fixed seed: q = eps * 10**u with u ~ Normal(centre, spread)."""
    rng = np.random.default_rng(20260101)
    eps = 1e-5
    shape = (4, 16)

    def layer(centre: float, spread: float) -> np.ndarray:
        u = rng.normal(centre, spread, size=shape)
        return (eps * np.power(10.0, u)).astype(np.float32)

    attn = layer(2.3, 0.6)  # r around 200: a few inputs fall below 49.25
    ffn = layer(4.0, 0.4)  # r around 1e4: all pass
    out = layer(3.0, 0.5)
    out[2, 5] = np.float32(np.nan)  # a NaN is counted and is a violation
    return {"layers.0.attn_norm": attn, "layers.0.ffn_norm": ffn, "output_norm": out}


def main() -> None:
    path = Path(__file__).with_name("q_dump.npz")
    np.savez(path, **q_arrays())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
