"""Streaming benchmark: rmsnorm-eps against plain numpy on multi-GB dumps, whole processes.

Run from the repository root::

    python benchmarks/bench_stream.py                  # 1 GiB per dtype in a temporary dir
    python benchmarks/bench_stream.py --size-mib 2048  # larger files
    python benchmarks/bench_stream.py --quick          # 64 MiB, 1e7 q values
    python benchmarks/bench_stream.py --also-4gib      # and the 16-bit kernels at 4 GiB

Data are generated under ``--data`` (default: a new directory under /tmp, deleted at the end;
bench-data/ is git-ignored if you keep them there) and read once before timing, so every
figure is for a warm page cache. **Every comparison is made within one run, interleaved**:
each round runs every command once, in rotation, for ``--repeats`` rounds, and each figure is
the median (and best) over the rounds, so that a slow spell of a shared machine hits all
commands alike. Judge by the ratios; absolute times on a shared machine say little. Peak
memory is each process's max RSS (``os.wait4``). Children run with bytecode caching on (as an
installed package has it), whatever PYTHONDONTWRITEBYTECODE says here. Printed:

* ``ratio --raw`` on N x 4096 float32 .npy, whole process, against the plain numpy loop
  (readinto into one reused buffer + ``np.vecdot``) as a whole process too (python + numpy
  start-up included: the CLI pays its own larger start-up), with the ratio (target >= 0.9);
  also with ``--threads 1`` and ``--threads 2``, and start-up excluded (``analyze_dump`` vs
  the loop, each timing itself in its own process);
* float16 and bfloat16 (uint16 + ``--dtype bfloat16``) files of the same size: bytes/s as a
  fraction of float32's in the same rounds (target >= 0.8), with ``--kernel numpy`` (no extra)
  and ``--kernel numba`` (the ``[fast]`` extra, when numba is installed), whole processes and
  start-up excluded; with ``--also-4gib`` the same comparison again on 4 GiB files;
* a q dump of 1e8 float32 values (1e7 with --quick) through the whole analysis;
* start-up: ``python -c 'import numpy'`` vs ``rmsnorm-eps --help`` vs ``bound --delta 0.01``,
  whole processes, interleaved (target: both below import numpy), ``ratio --raw`` on a
  16-row file: the fixed cost every ``ratio`` process pays before it reads, and (with the
  extra) the same with ``--kernel numba`` on a 16-row float16 file: loading the compiled
  kernels from their IR cache (llvmlite; numba itself is imported only by the first run).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
from rmsnorm_eps import kernel_choice
from rmsnorm_eps.analysis import analyze_dump
kind = (sys.argv[4:] or ["numpy"])[0]
with kernel_choice.using(kind):
    kernel_choice.sixteen_bit_sums(False)  # the compiled kernels loaded before the clock
    dtype = None if (sys.argv[3:] or ["-"])[0] == "-" else sys.argv[3]
    t = time.perf_counter()
    analyze_dump(sys.argv[1], 1e-5, raw=sys.argv[2] == "raw", dtype=dtype)
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
    e.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode cached
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


def rounds(cmds: dict[str, list[str]], repeats: int, inner_time: bool = False) -> dict[str, Any]:
    """Run every command once per round, in rotation, for ``repeats`` rounds: per command
    the list of wall times (or, with ``inner_time``, the seconds the child prints) and the
    largest max RSS."""
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, int] = dict.fromkeys(cmds, 0)
    names = list(cmds)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            wall, peak, out = run_with_rusage(cmds[name])
            walls[name].append(float(out.split()[-1]) if inner_time else wall)
            rss[name] = max(rss[name], peak)
    return {"walls": walls, "rss": rss}


def med(ts: list[float]) -> float:
    return statistics.median(ts)


#: Whether the ``[fast]`` extra is installed here (looked up, not imported).
HAVE_NUMBA = importlib.util.find_spec("numba") is not None
NUMBA = ("--kernel", "numba")


def sixteen_bit(paths: dict[str, Path], r: int, size_mib: int) -> None:
    """float16 and bfloat16 bytes/s over float32's, same rounds, with the numpy kernels
    (``--kernel numpy``: no extra) and the compiled ones (``--kernel numba``), whole
    processes and start-up excluded."""
    kernels = ["numpy", "numba"] if HAVE_NUMBA else ["numpy"]
    dtype = {"float16": (), "bfloat16": ("--dtype", "bfloat16")}
    whole = {"float32": ratio_cmd(paths["float32"], "--raw")}
    inner = {"float32": [sys.executable, "-c", IN_PROCESS, str(paths["float32"]), "raw"]}
    for kind in ("float16", "bfloat16"):
        for k in kernels:
            name = f"{kind} --kernel {k}"
            whole[name] = ratio_cmd(paths[kind], "--raw", *dtype[kind], "--kernel", k)
            inner[name] = [
                *(sys.executable, "-c", IN_PROCESS, str(paths[kind]), "raw"),
                *((dtype[kind][1],) if dtype[kind] else ("-",)),
                k,
            ]
    if HAVE_NUMBA:  # compile once (or load), so that the rounds time a warm cache
        run_with_rusage(whole["float16 --kernel numba"])
        run_with_rusage(whole["bfloat16 --kernel numba"])
    nbytes = paths["float32"].stat().st_size
    extra = "" if HAVE_NUMBA else " (numba not installed: the [fast] extra is not measured)"
    print(f"## float16 and bfloat16 against float32, {size_mib} MiB each, same rounds{extra}")
    for label, cmds, inner_time in (
        ("whole processes", whole, False),
        ("start-up excluded", inner, True),
    ):
        walls = rounds(cmds, r, inner_time)["walls"]
        f32 = walls["float32"]
        print(
            f"  {label}: float32 {med(f32):.3f} s ({min(f32):.3f}) "
            f"{nbytes / med(f32) / 1e9:.2f} GB/s"
        )
        for name, ts in walls.items():
            if name == "float32":
                continue
            frac = med(f32) / med(ts)  # same bytes: the ratio of times is the ratio of bytes/s
            print(
                f"    {name:26s} {med(ts):7.3f} s ({min(ts):.3f})  bytes/s / float32's "
                f"{frac:.2f} ({min(f32) / min(ts):.2f}); target >= 0.8: "
                f"{'yes' if frac >= 0.8 else 'NO'}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64 MiB files, 1e7 q values")
    ap.add_argument("--size-mib", type=int, default=1024, help="size of each activation file")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (interleaved)")
    ap.add_argument("--data", type=Path, default=None, help="keep the data here")
    ap.add_argument(
        "--also-4gib",
        action="store_true",
        help="also compare float16/bfloat16 with float32 on 4 GiB files (12 GiB of disk)",
    )
    args = ap.parse_args()
    if args.data is None:
        with tempfile.TemporaryDirectory(prefix="rmsnorm-eps-bench-", dir="/tmp") as tmp:
            run(args, Path(tmp))
    else:
        args.data.mkdir(exist_ok=True)
        run(args, args.data)


def run(args: argparse.Namespace, data: Path) -> None:
    size = (64 << 20) if args.quick else args.size_mib << 20
    q_count = 10**7 if args.quick else 10**8
    r = args.repeats
    mib = 1 << 20
    free = shutil.disk_usage(data).free
    if free < 3.5 * size + 8 * q_count + (12.5 * GIB if args.also_4gib else 0):
        raise SystemExit(f"{data}: {free >> 20} MiB free, the data need {3.5 * size / mib:.0f}")
    print(
        f"# rmsnorm-eps streaming benchmark; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}, numpy {np.__version__}; {r} interleaved rounds, median "
        f"(best) per command, warm page cache. A shared machine: read the ratios, which "
        f"compare commands of the same rounds."
    )
    paths = {}
    for kind in ("float32", "float16", "bfloat16"):
        paths[kind] = data / f"{kind}_{size // mib}MiB.npy"
        write_rows(paths[kind], size, kind)
        warm(paths[kind])
    nbytes = paths["float32"].stat().st_size
    base = [sys.executable, "-c", BASELINE, str(paths["float32"]), str(D)]
    cmds = {
        "rmsnorm-eps ratio --raw": ratio_cmd(paths["float32"], "--raw"),
        "  --threads 1": ratio_cmd(paths["float32"], "--raw", "--threads", "1"),
        "  --threads 2": ratio_cmd(paths["float32"], "--raw", "--threads", "2"),
        "numpy readinto+vecdot": base,
    }
    got = rounds(cmds, r)
    walls, rss = got["walls"], got["rss"]
    print()
    print(f"## ratio --raw on N x {D} float32 .npy, {size // mib} MiB, whole processes")
    for name, ts in walls.items():
        print(
            f"  {name:24s} {med(ts):7.3f} s ({min(ts):.3f})  {nbytes / med(ts) / 1e9:6.2f} GB/s"
            f"  peak RSS {rss[name] / mib:6.1f} MiB"
        )
    ours = walls["rmsnorm-eps ratio --raw"]
    plain = walls["numpy readinto+vecdot"]
    ratio = med(plain) / med(ours)
    print(
        f"  throughput ratio CLI / numpy loop: {ratio:.2f} (medians), "
        f"{min(plain) / min(ours):.2f} (bests); target >= 0.9: {'yes' if ratio >= 0.9 else 'NO'}"
    )
    print()
    print("## start-up excluded (each process times its own loop)")
    inner_cmds = {
        "analyze_dump float32": [sys.executable, "-c", IN_PROCESS, str(paths["float32"]), "raw"],
        "numpy loop": [sys.executable, "-c", BASELINE_IN_PROCESS, str(paths["float32"]), str(D)],
    }
    inner = rounds(inner_cmds, r, inner_time=True)["walls"]
    for name, ts in inner.items():
        print(f"  {name:24s} {med(ts):7.3f} s ({min(ts):.3f})  {nbytes / med(ts) / 1e9:6.2f} GB/s")
    a, b = inner["analyze_dump float32"], inner["numpy loop"]
    print(f"  ratio analyze_dump / numpy loop: {med(b) / med(a):.2f} ({min(b) / min(a):.2f})")
    print()
    sixteen_bit(paths, r, size // mib)
    if args.also_4gib:
        big = {kind: data / f"{kind}_4096MiB.npy" for kind in ("float32", "float16", "bfloat16")}
        for kind, path in big.items():
            write_rows(path, 4 * GIB, kind)
            warm(path)
        sixteen_bit(big, r, 4096)
        if args.data is None:
            for path in big.values():
                path.unlink()
    print()
    print(f"## q dump: {q_count:.0e} float32 q values through the whole analysis")
    qpath = data / f"q_{q_count:.0e}.npy"
    write_q(qpath, q_count)
    warm(qpath)
    qbytes = qpath.stat().st_size
    qr = rounds({"whole": ratio_cmd(qpath)}, r)
    t = med(qr["walls"]["whole"])
    print(f"  whole process {t:7.3f} s {qbytes / t / 1e9:6.2f} GB/s")
    print()
    print("## start-up, whole processes, 11 interleaved rounds (target: below import numpy)")
    tiny = data / "tiny.npy"
    np.save(tiny, np.ones((16, D), np.float32))
    tiny16 = data / "tiny16.npy"
    np.save(tiny16, np.ones((16, D), np.float16))
    if HAVE_NUMBA:  # compile once (or load), so that the rounds time a warm cache
        run_with_rusage(ratio_cmd(tiny16, "--raw", *NUMBA))
    start = rounds(
        {
            "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
            "rmsnorm-eps --help": [sys.executable, "-m", "rmsnorm_eps", "--help"],
            "bound --delta 0.01": [
                *(sys.executable, "-m", "rmsnorm_eps", "bound", "--delta", "0.01")
            ],
            "ratio --raw, 16 rows": ratio_cmd(tiny, "--raw"),
            **(
                {"  --kernel numba, float16": ratio_cmd(tiny16, "--raw", *NUMBA)}
                if HAVE_NUMBA
                else {}
            ),
        },
        11,
    )["walls"]
    numpy_t = med(start["python -c 'import numpy'"])
    for name, ts in start.items():
        print(
            f"  {name:26s} {med(ts) * 1000:6.1f} ms ({min(ts) * 1000:.1f})  "
            f"{med(ts) / numpy_t:.2f}x import numpy"
        )


if __name__ == "__main__":
    main()
