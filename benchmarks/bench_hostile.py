"""Hostile-input timings (issue 12): inputs built to be slow, as whole processes.

Run from the repository root::

    python benchmarks/bench_hostile.py            # 100,000 members, 20,000 globs
    python benchmarks/bench_hostile.py --quick    # 20,000 members, 5,000 globs

Inputs are generated under bench-data/hostile/ (git-ignored) on first use. Each figure is the
wall time and peak RSS (``os.wait4``) of one ``python -m rmsnorm_eps`` process, plus the time of
the library call alone inside a child (``analyze_dump``; ``load_config`` + resolution), so the
start-up and the rendering can be told apart:

* ``ratio`` on an .npz of N tiny members (three float32 q values each, one violating): json and
  sarif on stdout, ``analyze_dump`` alone, and with ``--text`` the text report (slow: rich lays
  out one row, and by default one histogram, per violating layer);
* ``config show`` and ``config diff`` on YAML configs of G globs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data" / "hostile"

LIBRARY_RATIO = """
import sys, time
from rmsnorm_eps.analysis import analyze_dump
t = time.perf_counter()
report = analyze_dump(sys.argv[1], 1e-5)
print(f"{time.perf_counter() - t:.3f}", len(report.layers))
"""


def many_members(n: int) -> Path:
    path = DATA / f"members-{n}.npz"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        q = np.array([1.0, 2.0, 1e-9], np.float32)
        np.savez(path, **{f"model.layers.{i}.input_layernorm": q for i in range(n)})
    return path


def many_globs(n: int, eps: str) -> Path:
    path = DATA / f"globs-{n}-{eps}.yaml"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        lines = [
            "schema_version: 1",
            "model: bench",
            "defaults:\n  eps: 1e-5\n  placement: inside\n  gain: w\n  norm: rms",
            "layers:",
        ]
        lines += [f'  "model.layers.{i}.*norm": {{eps: {eps}}}' for i in range(n)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


#: Runs ``python -m rmsnorm_eps ARGS`` and writes the process's own peak RSS (VmHWM) at exit:
#: ``ru_maxrss`` of a child would include this process's peak, which survives fork and exec.
_LAUNCHER = r"""
import atexit, os, runpy, sys
def _record():
    with open("/proc/self/status") as fh:
        hwm = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
    with open(os.environ["BENCH_HWM"], "w") as fh:
        fh.write(str(hwm))
atexit.register(_record)
if sys.argv[1] == "-c":
    code = sys.argv[2]
    sys.argv = sys.argv[2:]
    exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = ["rmsnorm-eps", *sys.argv[3:]]
    runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)
"""


def run(args: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS (MiB) and exit code of one child process; its stdout."""
    hwm = DATA / "hwm.txt"
    hwm.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_HWM": str(hwm)}
    env.pop("RMSNORM_EPS_FORMAT", None)
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - t
    peak = int(hwm.read_text()) / 1024 if hwm.exists() else float("nan")
    return wall, peak, proc.returncode, proc.stdout.decode("utf-8", "replace")


def line(label: str, args: list[str]) -> None:
    wall, rss, rc, _ = run(args)
    print(f"  {label:<44} {wall:7.2f} s  peak RSS {rss:6.1f} MiB  exit {rc}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--text", action="store_true", help="also the text report (minutes: one row per layer)"
    )
    opts = ap.parse_args()
    members = 20_000 if opts.quick else 100_000
    globs = 5_000 if opts.quick else 20_000
    print(f"# rmsnorm-eps hostile-input timings; {os.cpu_count()} CPUs, whole processes")
    dump = many_members(members)
    print(f"\n## ratio on an .npz of {members:,} tiny members")
    out = DATA / "report.txt"
    ratio = ["-m", "rmsnorm_eps", "ratio", "--eps", "1e-5", "--q-file", str(dump)]
    line("ratio --format json (stdout)", [*ratio, "--format", "json"])
    line("ratio --format sarif (stdout)", [*ratio, "--format", "sarif"])
    if opts.text:
        line("ratio text --histogram none", [*ratio, "--histogram", "none"])
        line("ratio text -o FILE (histograms of violating layers)", [*ratio, "-o", str(out)])
    _, _, _, text = run(["-c", LIBRARY_RATIO, str(dump)])
    print(f"  {'analyze_dump alone (inside the process)':<44} {float(text.split()[0]):7.2f} s")
    print(f"\n## config on a YAML of {globs:,} globs")
    a, b = many_globs(globs, "1e-6"), many_globs(globs, "1e-2")
    line("config show (text)", ["-m", "rmsnorm_eps", "config", "show", str(a)])
    line("config show --format json", ["-m", "rmsnorm_eps", "config", "show", str(a), "-f", "json"])
    line("config diff (text)", ["-m", "rmsnorm_eps", "config", "diff", str(a), str(b)])


if __name__ == "__main__":
    main()
