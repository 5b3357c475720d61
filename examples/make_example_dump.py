"""Write the example dumps shipped in examples/ (deterministic: fixed seed, no inputs needed).

    python examples/make_example_dump.py

q_dump.npz: mean squares q = mean(x**2) for 4 RMSNorm layers of a small model that uses
eps = 1e-5, each of shape (batch 2, tokens 16). Most inputs sit far above eps, but the
embeddings of a few tokens are small, and one layer holds inputs near eps, so that
`rmsnorm-eps ratio --eps 1e-5` finds inputs below the 1% bound (q/eps < 49.2512562814,
i.e. q < 4.92512562814e-4).

acts.npz: raw activations x of shape (8, 64) for two layers (for `--raw`): row 3 of layer
"embed_norm" is scaled down to RMS 3e-3 (q = 9e-6, q/eps = 0.9).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make_q_dump(rng: np.random.Generator) -> dict[str, np.ndarray]:
    shape = (2, 16)
    layers: dict[str, np.ndarray] = {}
    # layer 0 input: token embeddings, small q (1e-4 .. 1e-1), a few near eps
    q0 = 10.0 ** rng.uniform(-3.3, -1.0, shape)
    q0[0, 3] = 2.0e-5  # q/eps = 2: attenuation 0.816
    q0[1, 7] = 3.1e-4  # q/eps = 31
    layers["model.layers.0.input_layernorm"] = q0
    # later layers: large q, position 0 very large
    q1 = 10.0 ** rng.uniform(-1.0, 1.5, shape)
    q1[:, 0] = 10.0 ** rng.uniform(3.0, 4.0, 2)
    layers["model.layers.0.post_attention_layernorm"] = q1
    q2 = 10.0 ** rng.uniform(-2.0, 1.0, shape)
    q2[1, 12] = 4.9e-4  # q/eps = 49: just below the 1% bound (49.2512562814)
    layers["model.layers.1.input_layernorm"] = q2
    q3 = 10.0 ** rng.uniform(0.0, 2.0, shape)
    layers["model.norm"] = q3
    return {k: v.astype(np.float32) for k, v in layers.items()}


def make_acts(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x0 = rng.standard_normal((8, 64)).astype(np.float32) * 0.05
    x0[3] *= 3.0e-3 / float(np.sqrt(np.mean(x0[3].astype(np.float64) ** 2)))
    x1 = rng.standard_normal((8, 64)).astype(np.float32)
    return {"embed_norm": x0, "final_norm": x1}


def main() -> None:
    rng = np.random.default_rng(20261130)
    np.savez(HERE / "q_dump.npz", **make_q_dump(rng))
    np.savez(HERE / "acts.npz", **make_acts(rng))
    print("wrote", HERE / "q_dump.npz", "and", HERE / "acts.npz")


if __name__ == "__main__":
    main()
