"""Write the merge golden inputs: examples/ci/q_dump.npz split along axis 0 into two shards,
and each shard's `ratio --save-summary` file. Run from the repository root:
``python tests/data/merge/make_shards.py`` (deterministic: same bytes every time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path("tests/data/merge")


def main() -> None:
    with np.load("examples/ci/q_dump.npz") as dump:
        arrays = {name: dump[name] for name in dump.files}
    for i, rows in enumerate((slice(0, 2), slice(2, 4))):
        shard = HERE / f"shard{i}.npz"
        np.savez(shard, **{name: a[rows] for name, a in arrays.items()})
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rmsnorm_eps",
                "ratio",
                "--eps",
                "1e-5",
                "--q-file",
                str(shard),
                "--top",
                "3",
                "--save-summary",
                str(HERE / f"shard{i}.summary.json"),
                "--format",
                "json",
                "--exit-zero",
                "--output",
                "/dev/null",
            ],
            check=True,
        )


if __name__ == "__main__":
    main()
