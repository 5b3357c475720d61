"""``--raw`` peak memory on rows longer than a chunk and on Fortran-ordered files (issue 21).

Run from the repository root::

    python benchmarks/bench_raw_rows.py            # one deflated row of 2**27 float32, ...
    python benchmarks/bench_raw_rows.py --quick    # 2**24

Cases (files generated under bench-data/raw_rows/, git-ignored, on first use):

* one row of ``2**27`` float32 values (512 MiB of data) in a deflated ``.npz`` member: about
  0.5 MB on disk (before issue 21, ``ratio --raw`` peaked at 1.6 GB on it: the whole row and
  its float64 copy);
* the same row in a plain ``.npy``;
* a Fortran-ordered ``.npy`` of ``2**22 x 16`` float32 (more rows than a block), with
  ``--norm layer`` too.

Each line is one ``python -m rmsnorm_eps ratio --raw`` process: wall time and peak RSS
(``os.wait4``), and whether it stayed within the 256 MiB promise (docs/security.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data" / "raw_rows"
LIMIT_MIB = 256


def _npz_row(path: Path, n: int) -> None:
    """A deflated .npz member of one row of n float32 (written a MiB at a time)."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1), np.float32))
    header["shape"] = (1, n)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("row.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        block = np.full(1 << 18, 0.5, np.float32).tobytes()
        for _ in range(n // (1 << 18)):
            fh.write(block)


def _inputs(quick: bool) -> list[tuple[str, Path, tuple[str, ...]]]:
    DATA.mkdir(parents=True, exist_ok=True)
    n = 1 << (24 if quick else 27)
    npz = DATA / f"row_{n}.npz"
    if not npz.exists():
        _npz_row(npz, n)
    npy = DATA / f"row_{n}.npy"
    if not npy.exists():
        arr = np.lib.format.open_memmap(npy, "w+", np.float32, (1, n))
        arr[:] = 0.5
        del arr
    rows = 1 << (20 if quick else 22)
    fort = DATA / f"fortran_{rows}x16.npy"
    if not fort.exists():
        arr = np.lib.format.open_memmap(fort, "w+", np.float32, (rows, 16), fortran_order=True)
        arr[:] = 0.5
        del arr
    return [
        (f"one deflated row of 2**{n.bit_length() - 1} float32 (.npz)", npz, ()),
        (f"one row of 2**{n.bit_length() - 1} float32 (.npy)", npy, ()),
        (f"Fortran order {rows} x 16 float32", fort, ()),
        (f"Fortran order {rows} x 16 float32, --norm layer", fort, ("--norm", "layer")),
    ]


#: Runs the CLI and prints its own peak RSS (VmHWM) at exit: ru_maxrss of a child would include
#: this process's peak (it survives fork and exec), and this one wrote the inputs.
_LAUNCHER = r"""
import atexit, runpy, sys
def _peak():
    with open("/proc/self/status") as fh:
        hwm = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
    sys.__stderr__.write(f"PEAK_KIB {hwm}\n")
atexit.register(_peak)
sys.argv[0] = "rmsnorm-eps"
runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)
"""


def _run(path: Path, extra: tuple[str, ...]) -> tuple[float, float, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["ratio", "--eps", "1e-5", "--raw", "-q", str(path), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - t0
    peak = next(int(x.split()[1]) for x in proc.stderr.splitlines() if x.startswith("PEAK_KIB"))
    return wall, peak / 1024, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    print(f"# ratio --raw peak memory ({'quick' if quick else 'full'}); {os.cpu_count()} CPUs")
    for label, path, extra in _inputs(quick):
        wall, peak, code = _run(path, extra)
        ok = "within" if peak <= LIMIT_MIB else "OVER"
        print(
            f"  {label:48s} {wall:7.2f} s  peak RSS {peak:7.1f} MiB  ({ok} {LIMIT_MIB} MiB, "
            f"exit {code}; {path.stat().st_size / 1e6:.1f} MB on disk)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
