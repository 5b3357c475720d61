"""Run torch.nn.RMSNorm on the parity probes and save its outputs (docs/parity.md walkthrough).

    rmsnorm-eps probe --dim 64 --eps 1e-6 --save-data examples/parity/probes.npz
    python examples/parity/run_torch.py None examples/parity/torch_eps_none.npy
    python examples/parity/run_torch.py 1e-6 examples/parity/torch_eps_1e-6.npy

eps=None makes torch use float32's machine epsilon (1.19e-7) instead of the model's 1e-6.
"""

import sys
from pathlib import Path

import numpy as np
import torch

eps = None if sys.argv[1] == "None" else float(sys.argv[1])
probes = np.load(Path(sys.argv[2]).with_name("probes.npz"), allow_pickle=False)
x = torch.from_numpy(probes["inputs"]).to(torch.float32)  # exact: the probes are float32 values
norm = torch.nn.RMSNorm(64, eps=eps)
with torch.no_grad():
    np.save(sys.argv[2], norm(x).numpy())
