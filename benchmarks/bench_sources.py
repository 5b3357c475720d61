"""Throughput of ``ratio --raw`` per input format: .npy against .safetensors and torch.save.

    python benchmarks/bench_sources.py           # 1 GiB of N x 4096 float32 activations
    python benchmarks/bench_sources.py --quick   # 64 MiB

The same values are written once under ``bench-data/`` as .npy, .safetensors (one F32 tensor)
and a torch.save file (one tensor), then each is analysed by whole processes (median of
``--repeats`` runs, warm page cache, peak RSS of the child), and in-process by
``analyze_dump`` (start-up and imports excluded, torch's too: its import alone takes seconds).
Target from issue 15: the safetensors path within 0.8x of the .npy path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_stream as bs  # the launcher, timing and data writers

D = bs.D


def write_npy(path: Path, size: int) -> None:
    """bench_stream's N x 4096 rows, copied by sequential writes like the other two formats: a
    file written through a memory map (as ``write_rows`` does) is read up to 2.5x slower from
    the page cache, which would decide the comparison by itself."""
    if path.exists():
        return
    gen = path.with_suffix(".gen.npy")
    bs.write_rows(gen, size, "float32")
    tmp = path.with_suffix(".tmp")
    with open(gen, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    gen.unlink()
    tmp.rename(path)


def write_safetensors(npy: Path, path: Path) -> None:
    """The .npy's data as one F32 tensor ``q`` (the bytes copied, not re-generated)."""
    if path.exists():
        return
    arr = np.load(npy, mmap_mode="r")
    header = json.dumps(
        {"q": {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [0, arr.nbytes]}}
    ).encode()
    header += b" " * ((-len(header)) % 8)
    offset = int(arr.offset)
    del arr
    tmp = path.with_suffix(".tmp")
    with open(npy, "rb") as src, open(tmp, "wb") as dst:
        dst.write(struct.pack("<Q", len(header)) + header)
        src.seek(offset)
        shutil.copyfileobj(src, dst, 1 << 24)
    tmp.rename(path)


def write_torch(npy: Path, path: Path) -> bool:
    """The .npy's data as one tensor saved by torch.save; False when torch is not installed."""
    if path.exists():
        return True
    try:
        import torch
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the given NumPy array is not writable"
        t = torch.from_numpy(np.load(npy, mmap_mode="r"))
    tmp = path.with_suffix(".tmp")
    torch.save(t, tmp)
    tmp.rename(path)
    return True


#: Alternates analyze_dump over the files in one process and prints each one's best time: on a
#: machine busy with other work, the best of interleaved runs compares the readers fairly.
INTERLEAVED = """
import sys, time
from rmsnorm_eps.analysis import analyze_dump
repeats, paths = int(sys.argv[1]), sys.argv[2:]
best = [float("inf")] * len(paths)
for _ in range(repeats):
    for i, path in enumerate(paths):
        t = time.perf_counter()
        analyze_dump(path, 1e-5, raw=True)
        best[i] = min(best[i], time.perf_counter() - t)
print(" ".join(map(str, best)))
"""


def interleaved(paths: list[str], repeats: int) -> list[float]:
    out = bs.run_with_rusage([sys.executable, "-c", INTERLEAVED, str(repeats), *paths])[2]
    return [float(x) for x in out.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 MiB instead of 1 GiB")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    size = (64 if args.quick else 1024) << 20
    data = bs.ROOT / "bench-data"
    data.mkdir(exist_ok=True)
    npy = data / f"by_format_f32_{size >> 20}MiB.npy"
    write_npy(npy, size)
    st = npy.with_suffix(".safetensors")
    write_safetensors(npy, st)
    pt = npy.with_suffix(".pt")
    files = [("npy", npy), ("safetensors", st)]
    if write_torch(npy, pt):
        files.append(("torch.save", pt))
    nbytes = np.load(npy, mmap_mode="r").nbytes
    print(
        f"# ratio --raw on {nbytes >> 20} MiB of N x {D} float32 by format; "
        f"{len(os.sched_getaffinity(0))} CPUs, median of {args.repeats} runs, warm page cache"
    )
    whole: dict[str, float] = {}
    inner: dict[str, float] = {}
    for name, path in files:
        bs.warm(path)
        wall, rss = bs.measure(bs.ratio_cmd(path, "--raw"), args.repeats)
        script = ("import torch\n" if name == "torch.save" else "") + bs.IN_PROCESS
        t = bs.inner([sys.executable, "-c", script, str(path), "raw"], args.repeats)
        whole[name], inner[name] = wall, t
        print(
            f"  {name:12s} whole process {wall:6.3f} s {nbytes / wall / 1e9:6.2f} GB/s"
            f"  peak RSS {rss / 2**20:6.1f} MiB;  analyze_dump {t:6.3f} s"
            f" {nbytes / t / 1e9:6.2f} GB/s"
        )
    best = interleaved([str(path) for _, path in files[:2]], max(5, args.repeats))
    print(
        f"  interleaved in one process, best of {max(5, args.repeats)}: npy {best[0]:.3f} s "
        f"({nbytes / best[0] / 1e9:.2f} GB/s), safetensors {best[1]:.3f} s "
        f"({nbytes / best[1] / 1e9:.2f} GB/s), ratio {best[0] / best[1]:.2f}"
    )
    for name in whole:
        if name != "npy":
            print(
                f"  {name} / npy throughput: whole process {whole['npy'] / whole[name]:.2f}, "
                f"start-up excluded {inner['npy'] / inner[name]:.2f} (target >= 0.80)"
            )


if __name__ == "__main__":
    main()
