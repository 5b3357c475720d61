"""Streaming benchmark: rmsnorm-eps against plain numpy on multi-GB dumps, whole processes.

Run from the repository root::

    python benchmarks/bench_stream.py          # 1 GiB and 4 GiB float32 (writes ~7 GB of data)
    python benchmarks/bench_stream.py --quick  # 64 MiB and 256 MiB

Data are generated once under bench-data/ (git-ignored) and read once before timing, so every
figure is for a warm page cache. Each figure is the median wall time of ``--repeats`` runs of a
separate process; peak memory is that process's max RSS (``os.wait4``). Printed:

* ``ratio --raw`` on N x 4096 float32 .npy vs the best plain-numpy streaming kernel (readinto
  into one reused buffer + ``np.vecdot``) vs the naive script (``np.load`` +
  ``astype(float64)**2 .mean(-1)``), with ratios;
* float16 and bfloat16 (uint16 + ``--dtype bfloat16``) inputs with the same rows;
* a q dump of 1e8 float32 values (1e7 with --quick) through the whole analysis, as a whole
  process and as ``analyze_dump`` alone;
* start-up medians of ``--help`` and ``bound --delta 0.01``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
D = 4096
GIB = 1 << 30

BASELINE = """
import sys, numpy as np
path, d = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as f:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else (
        np.lib.format.read_array_header_2_0)
    shape, fortran, dtype = read(f)
    rows = (1 << 22) // (d * dtype.itemsize)
    buf = np.empty((rows, d), dtype)
    mv = memoryview(buf).cast("B")
    n, done, total = shape[0], 0, 0.0
    while done < n:
        r = min(rows, n - done)
        f.readinto(mv[: r * d * dtype.itemsize])
        total += float(np.vecdot(buf[:r], buf[:r]).sum())
        done += r
print(total)
"""

NAIVE = """
import sys, numpy as np
x = np.load(sys.argv[1])
q = (x.astype(np.float64) ** 2).mean(-1)
print(q.min())
"""

IN_PROCESS = """
import sys, time
from rmsnorm_eps.analysis import analyze_dump
t = time.perf_counter()
analyze_dump(sys.argv[1], 1e-5, raw=sys.argv[2] == "raw", dtype=(sys.argv[3:] or [None])[0])
print(time.perf_counter() - t)
"""

BASELINE_IN_PROCESS = "import time\nt = time.perf_counter()\n" + BASELINE.replace(
    "print(total)", "print(time.perf_counter() - t)"
).replace("import sys, numpy as np", "import sys\nimport numpy as np\nt = time.perf_counter()")


def inner(cmd: list[str], repeats: int) -> float:
    """Median of the seconds a child prints (its own timing, start-up excluded)."""
    return statistics.median(float(run_with_rusage(cmd)[2]) for _ in range(repeats))


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def measure(cmd: list[str], repeats: int) -> tuple[float, int]:
    """Median wall time and the largest max RSS over ``repeats`` runs."""
    walls, rsss = [], []
    for _ in range(repeats):
        wall, rss, _ = run_with_rusage(cmd)
        walls.append(wall)
        rsss.append(rss)
    return statistics.median(walls), max(rsss)


# A small launcher runs each measured command: on Linux a child's max RSS starts from its
# parent's at fork time, so forking from this (large) process would inflate every figure.
LAUNCHER = """
import os, subprocess, sys, time
t = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
out = p.stdout.read()
_, status, usage = os.wait4(p.pid, 0)
wall = time.perf_counter() - t
sys.stdout.write(f"{wall} {usage.ru_maxrss * 1024} {os.waitstatus_to_exitcode(status)}\\n")
sys.stdout.write(out.decode())
"""


def run_with_rusage(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds and max RSS (bytes) of one run of ``cmd``, and its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *cmd],
        capture_output=True,
        text=True,
        env=env(),
        check=True,
    ).stdout
    head, _, rest = out.partition("\n")
    wall, rss, code = head.split()
    if int(code) not in (0, 1):
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}")
    return float(wall), int(rss), rest


def write_rows(path: Path, nbytes: int, kind: str) -> None:
    """N x 4096 activations of ``kind`` (float32, float16, bfloat16 bits), ``nbytes`` of data."""
    if path.exists():
        return
    itemsize = 4 if kind == "float32" else 2
    n = nbytes // (D * itemsize)
    dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[kind]
    rng = np.random.default_rng(0)
    block = rng.standard_normal((4096, D), dtype=np.float32)
    tmp = path.with_suffix(".tmp")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(n, D))
    for i in range(0, n, 4096):
        m = min(4096, n - i)
        scale = np.float32(10.0 ** rng.uniform(-3, 0))  # rows of different RMS
        x = block[:m] * scale
        if kind == "bfloat16":
            out[i : i + m] = (x.view(np.uint32) >> 16).astype(np.uint16)
        else:
            out[i : i + m] = x.astype(dtype)
    out.flush()
    del out
    tmp.rename(path)


def write_q(path: Path, count: int) -> None:
    if path.exists():
        return
    rng = np.random.default_rng(1)
    tmp = path.with_suffix(".tmp")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(count,))
    step = 1 << 22
    for i in range(0, count, step):
        m = min(step, count - i)
        out[i : i + m] = (10.0 ** rng.uniform(-9, -1, m)).astype(np.float32)  # q/eps 1e-4..1e4
    out.flush()
    del out
    tmp.rename(path)


def warm(path: Path) -> None:
    buf = bytearray(1 << 24)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def ratio_cmd(path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rmsnorm_eps",
        "ratio",
        "--eps",
        "1e-5",
        "-q",
        str(path),
        "--exit-zero",
        "--format",
        "json",
        *extra,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64 MiB / 256 MiB, 1e7 q values")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=ROOT / "bench-data")
    args = ap.parse_args()
    args.data.mkdir(exist_ok=True)
    sizes = [64 << 20, 256 << 20] if args.quick else [GIB, 4 * GIB]
    q_count = 10**7 if args.quick else 10**8
    r = args.repeats
    mib = 1 << 20

    print(
        f"# rmsnorm-eps streaming benchmark ({'quick' if args.quick else 'full'}); "
        f"{os.cpu_count()} CPUs, numpy {np.__version__}, median of {r} runs, warm page cache"
    )
    print()
    print("## ratio --raw on N x 4096 float32 .npy (whole process)")
    f32_rate = {}
    f32_inner = {}
    for size in sizes:
        path = args.data / f"f32_{size // mib}MiB.npy"
        write_rows(path, size, "float32")
        warm(path)
        nbytes = path.stat().st_size
        t_ours, rss_ours = measure(ratio_cmd(path, "--raw"), r)
        t_two, rss_two = measure(ratio_cmd(path, "--raw", "--threads", "1"), r)
        t_base, rss_base = measure([sys.executable, "-c", BASELINE, str(path), str(D)], r)
        f32_rate[size] = nbytes / t_ours
        rate = nbytes / t_ours / 1e9
        print(
            f"{size // mib:>6} MiB  rmsnorm-eps      {t_ours:7.3f} s {rate:6.2f} GB/s"
            f"  peak RSS {rss_ours / mib:6.1f} MiB"
        )
        print(
            f"{'':>10} rmsnorm-eps -t1  {t_two:7.3f} s {nbytes / t_two / 1e9:6.2f} GB/s"
            f"  peak RSS {rss_two / mib:6.1f} MiB"
        )
        print(
            f"{'':>10} numpy streaming  {t_base:7.3f} s {nbytes / t_base / 1e9:6.2f} GB/s"
            f"  peak RSS {rss_base / mib:6.1f} MiB"
        )
        line = f"{'':>10} ratio ours/streaming {t_base / t_ours:5.2f} (target >= 0.80)"
        if size <= GIB:
            t_naive, rss_naive = measure([sys.executable, "-c", NAIVE, str(path)], 1)
            print(
                f"{'':>10} naive np.load    {t_naive:7.3f} s "
                f"{nbytes / t_naive / 1e9:6.2f} GB/s  peak RSS {rss_naive / mib:6.1f} MiB"
            )
            line += f", ours/naive {t_naive / t_ours:6.1f}x (target >= 50x)"
        else:
            line += "; naive not run at this size (needs ~5x the file in RAM)"
        print(line)
        t_in = inner([sys.executable, "-c", IN_PROCESS, str(path), "raw"], r)
        t_bin = inner([sys.executable, "-c", BASELINE_IN_PROCESS, str(path), str(D)], r)
        f32_inner[size] = nbytes / t_in
        print(
            f"{'':>10} start-up excluded: analyze_dump {nbytes / t_in / 1e9:6.2f} GB/s, "
            f"numpy streaming {nbytes / t_bin / 1e9:6.2f} GB/s, ratio {t_bin / t_in:5.2f}"
        )
        ok = "yes" if rss_ours <= 256 * mib else "NO"
        print(f"{'':>10} peak RSS <= 256 MiB: {ok}")
    print()
    print("## float16 and bfloat16 activations (same rows as the first float32 file)")
    size0 = sizes[0]
    for kind, extra in (("float16", ()), ("bfloat16", ("--dtype", "bfloat16"))):
        path = args.data / f"{kind}_{size0 // mib}MiB_rows.npy"
        write_rows(path, size0 // 2, kind)
        warm(path)
        nbytes = path.stat().st_size
        t, rss = measure(ratio_cmd(path, "--raw", *extra), r)
        t_in = inner([sys.executable, "-c", IN_PROCESS, str(path), "raw", *extra[1:]], r)
        rate = nbytes / t
        rate_in = nbytes / t_in
        print(
            f"{kind:>9}: start-up excluded {rate_in / 1e9:6.2f} GB/s "
            f"({rate_in / f32_inner[size0]:.0%} of float32 in bytes/s, "
            f"{2 * rate_in / f32_inner[size0]:.0%} in rows/s)"
        )
        print(
            f"{kind:>9}: {t:7.3f} s {rate / 1e9:6.2f} GB/s "
            f"({rate / f32_rate[size0]:.0%} of float32 in bytes/s, "
            f"{2 * rate / f32_rate[size0]:.0%} in rows/s; target >= 50%)"
            f"  peak RSS {rss / mib:6.1f} MiB"
        )
    print()
    print(f"## q dump: {q_count:.0e} float32 q values through the whole analysis")
    qpath = args.data / f"q_{q_count:.0e}.npy"
    write_q(qpath, q_count)
    warm(qpath)
    nbytes = qpath.stat().st_size
    t, rss = measure(ratio_cmd(qpath), r)
    t_q = inner([sys.executable, "-c", IN_PROCESS, str(qpath), "q"], r)
    print(f"whole process {t:7.3f} s {nbytes / t / 1e9:6.2f} GB/s  peak RSS {rss / mib:6.1f} MiB")
    print(f"analyze_dump  {t_q:7.3f} s {nbytes / t_q / 1e9:6.2f} GB/s (target >= 3 GB/s)")
    print()
    print("## start-up (median of 11 runs, python -m rmsnorm_eps; target <= 150 ms)")
    for cmd in (["--help"], ["bound", "--delta", "0.01"]):
        walls = [run_with_rusage([sys.executable, "-m", "rmsnorm_eps", *cmd])[0] for _ in range(11)]
        print(f"{' '.join(cmd):<22} {statistics.median(walls) * 1000:6.1f} ms")


if __name__ == "__main__":
    main()
