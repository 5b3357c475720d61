"""Hostile-input timings (issue 12): inputs built to be slow, as whole processes.

Run from the repository root::

    python benchmarks/bench_hostile.py            # 4,096 members, 29,900 globs
    python benchmarks/bench_hostile.py --quick    # 1,024 members, 5,000 globs

Inputs are generated under bench-data/hostile/ (git-ignored) on first use. Each figure is the
wall time and peak RSS (``os.wait4``) of one ``python -m rmsnorm_eps`` process, plus the time of
the library call alone inside a child (``analyze_dump``; ``load_config`` + resolution), so the
start-up and the rendering can be told apart:

* ``ratio`` on an .npz of N tiny members (three float32 q values each, one violating; N is the
  default layer cap), in every format on stdout, text and json to a file with ``-o``,
  ``--save-summary``, and ``analyze_dump`` alone; ``compare`` (text and json) on the same file
  (every format of both: ``bench_layers.py``);
* ``config show`` and ``config diff`` on YAML configs of G globs (G = 29,900 is about as many
  as the YAML caps let in: 120,000 values).

Every line states whether the process stayed within the 256 MiB promise (docs/security.md).
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


#: The peak RSS every input must stay within (docs/security.md).
PROMISE_MIB = 256.0


def line(label: str, args: list[str]) -> None:
    wall, rss, rc, _ = run(args)
    ok = "ok" if rss <= PROMISE_MIB else "OVER 256 MiB"
    print(f"  {label:<44} {wall:7.2f} s  peak RSS {rss:6.1f} MiB  exit {rc}  {ok}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,024 members and 5,000 globs")
    opts = ap.parse_args()
    members = 1_024 if opts.quick else 4_096  # a dump holds at most 4,096 layers by default
    globs = 5_000 if opts.quick else 29_900
    print(f"# rmsnorm-eps hostile-input timings; {os.cpu_count()} CPUs, whole processes")
    dump = many_members(members)
    print(f"\n## ratio and compare on an .npz of {members:,} tiny members")
    ratio = ["-m", "rmsnorm_eps", "ratio", "--eps", "1e-5", str(dump)]
    for fmt in ("text", "json", "markdown", "github", "junit", "sarif"):
        line(f"ratio --format {fmt} (stdout)", [*ratio, "--format", fmt])
    line("ratio --histogram none (stdout)", [*ratio, "--histogram", "none"])
    line("ratio -o FILE (text)", [*ratio, "-o", str(DATA / "report.txt")])
    line("ratio -f json -o FILE", [*ratio, "-f", "json", "-o", str(DATA / "report.json")])
    line("ratio --save-summary FILE", [*ratio, "--save-summary", str(DATA / "summary.json")])
    compare = ["-m", "rmsnorm_eps", "compare", str(dump), "--from", "eps=1e-6", "--to", "eps=1e-5"]
    line("compare (text)", compare)
    line("compare --format json", [*compare, "--format", "json"])
    _, _, _, text = run(["-c", LIBRARY_RATIO, str(dump)])
    print(f"  {'analyze_dump alone (inside the process)':<44} {float(text.split()[0]):7.2f} s")
    print(f"\n## config on a YAML of {globs:,} globs")
    a, b = many_globs(globs, "1e-6"), many_globs(globs, "1e-2")
    config = ["-m", "rmsnorm_eps", "config"]
    line("config show (text)", [*config, "show", str(a)])
    line("config show --format json", [*config, "show", str(a), "-f", "json"])
    for fmt in ("text", "json", "markdown", "github", "junit", "sarif"):
        line(f"config diff --format {fmt}", [*config, "diff", str(a), str(b), "-f", fmt])


if __name__ == "__main__":
    main()
