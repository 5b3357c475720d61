"""Peak memory of whole reports: every format of ``ratio`` and ``compare`` on a dump of as many
layers as a dump may hold (4,096 by default, issue 20), as whole processes.

Run from the repository root::

    python benchmarks/bench_layers.py                 # 4,096 layers
    python benchmarks/bench_layers.py --layers 1024   # another count

The dump (``bench-data/hostile/members-N.npz``, git-ignored) holds N tiny layers of three
float32 q values each, one violating, so every layer has a finding in every format. Each line
is one ``python -m rmsnorm_eps`` process: its wall time and its own peak RSS (VmHWM, read at
exit), and whether it stayed within the 256 MiB promise (docs/security.md). Reports are built
whole and written at once (one string per report), so these figures are the whole cost.
"""

from __future__ import annotations

import argparse
import os

from bench_hostile import DATA, line, many_members

FORMATS = ("text", "json", "markdown", "github", "junit", "sarif")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4096, help="layers in the dump")
    opts = ap.parse_args()
    dump = many_members(opts.layers)
    print(f"# rmsnorm-eps whole reports of {opts.layers:,} layers; {os.cpu_count()} CPUs")
    ratio = ["-m", "rmsnorm_eps", "ratio", "--eps", "1e-5", str(dump)]
    print("\n## ratio")
    for fmt in FORMATS:
        line(f"ratio --format {fmt} (stdout)", [*ratio, "--format", fmt])
    line("ratio -o FILE (text)", [*ratio, "-o", str(DATA / "report.txt")])
    line(
        "ratio --report sarif=FILE (text on stdout)", [*ratio, "--report", f"sarif={DATA}/r.sarif"]
    )
    line("ratio --save-summary FILE", [*ratio, "--save-summary", str(DATA / "summary.json")])
    compare = ["-m", "rmsnorm_eps", "compare", str(dump), "--from", "eps=1e-6", "--to", "eps=1e-5"]
    print("\n## compare")
    for fmt in FORMATS:
        line(f"compare --format {fmt} (stdout)", [*compare, "--format", fmt])


if __name__ == "__main__":
    main()
