"""Hostile-input timings (issue 12): inputs built to be slow, as whole processes.

Run from the repository root::

    python benchmarks/bench_hostile.py            # 100,000 members, 20,000 globs
    python benchmarks/bench_hostile.py --quick    # 20,000 members, 5,000 globs

Inputs are generated under bench-data/hostile/ (git-ignored) on first use. Each figure is the
wall time and peak RSS (``os.wait4``) of one ``python -m rmsnorm_eps`` process, plus the time of
the library call alone inside a child (``analyze_dump``; ``load_config`` + resolution), so the
start-up and the rendering can be told apart:

* ``ratio`` on an .npz of N tiny members (three float32 q values each, one violating): text,
  json and ``-o`` to a file (text), and ``analyze_dump`` alone;
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


def run(args: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS (MiB) and exit code of one child process; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RMSNORM_EPS_FORMAT", None)
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdout is not None
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), out


def line(label: str, args: list[str]) -> None:
    wall, rss, rc, _ = run(args)
    print(f"  {label:<44} {wall:7.2f} s  peak RSS {rss:6.1f} MiB  exit {rc}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    opts = ap.parse_args()
    members = 20_000 if opts.quick else 100_000
    globs = 5_000 if opts.quick else 20_000
    print(f"# rmsnorm-eps hostile-input timings; {os.cpu_count()} CPUs, whole processes")
    dump = many_members(members)
    print(f"\n## ratio on an .npz of {members:,} tiny members")
    out = DATA / "report.txt"
    for fmt in ("text", "json"):
        line(f"ratio --format {fmt} (stdout)", ["-m", "rmsnorm_eps", "ratio", "--eps", "1e-5",
             "--q-file", str(dump), "--format", fmt])  # fmt: skip
    line("ratio -o FILE (text)", ["-m", "rmsnorm_eps", "ratio", "--eps", "1e-5", "--q-file",
         str(dump), "-o", str(out)])  # fmt: skip
    _, _, _, text = run(["-c", LIBRARY_RATIO, str(dump)])
    print(f"  {'analyze_dump alone (inside the process)':<44} {float(text.split()[0]):7.2f} s")
    print(f"\n## config on a YAML of {globs:,} globs")
    a, b = many_globs(globs, "1e-6"), many_globs(globs, "1e-2")
    line("config show (text)", ["-m", "rmsnorm_eps", "config", "show", str(a)])
    line("config show --format json", ["-m", "rmsnorm_eps", "config", "show", str(a), "-f", "json"])
    line("config diff (text)", ["-m", "rmsnorm_eps", "config", "diff", str(a), str(b)])


if __name__ == "__main__":
    main()
