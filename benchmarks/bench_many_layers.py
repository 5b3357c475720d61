"""Time per layer on dumps of many tiny layers, up to the layer cap: the timings the test suite
used to assert (tests now count operations instead; see tests/unit/test_sources.py,
tests/test_config_globs.py, tests/test_hostile_many_layers.py).

    python benchmarks/bench_many_layers.py           # 1,024 and 4,096 layers (the cap)
    python benchmarks/bench_many_layers.py --quick   # 256 and 1,024

For each size N it prints the seconds (best of ``--repeats``, in-process, imports excluded) of:
opening an .npz of N one-row members and reading every value; ``analyze_dump`` on it; the text
report of ``ratio`` on it; and ``load_config`` + ``resolved_entries`` + ``eps_for_layers`` +
``diff_configs`` on a YAML of N globs with N layer names. The last column is the time per
layer of the larger size over the smaller's: about 1 when the cost is linear in N.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.config import diff_configs, eps_for_layers, load_config
from rmsnorm_eps.sources import open_sources


def _npz(path: Path, n: int) -> Path:
    buf = io.BytesIO()
    np.save(buf, np.array([1.0, 2.0, 1e-9], np.float32), allow_pickle=False)
    item = buf.getvalue()
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(n):
            zf.writestr(f"model.layers.{i}.input_layernorm.npy", item)
    return path


def _yaml(path: Path, n: int) -> Path:
    lines = ["schema_version: 1", "defaults: {eps: 1e-6}", "layers:"]
    lines += [f'  "model.layers.{i}.*": {{eps: {1 + i % 7}e-6}}' for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _cases(tmp: Path, n: int) -> dict[str, Callable[[], object]]:
    from typer.testing import CliRunner

    from rmsnorm_eps.cli import app

    dump = _npz(tmp / f"q{n}.npz", n)
    config_path = _yaml(tmp / f"c{n}.yaml", n)
    names = [f"model.layers.{i}.input_layernorm" for i in range(n)]

    def read() -> int:
        opened = open_sources(dump)
        return sum(c.size for s in opened.sources for _, c in s.iter_elements(1024))

    def config() -> object:
        c = load_config(config_path)
        c.resolved_entries()
        eps_for_layers(c, names, fallback=1.0)
        return diff_configs(c, c)

    return {
        "open + read": read,
        "analyze_dump": lambda: analyze_dump(dump, 1e-5),
        "ratio (CLI, text)": lambda: CliRunner().invoke(app, ["ratio", str(dump), "--eps", "1e-5"]),
        "config globs": config,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 and 1,024 layers")
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args()
    small, big = (256, 1024) if opts.quick else (1024, 4096)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        a, b = _cases(tmp, small), _cases(tmp, big)
        print(f"# many tiny layers: best of {opts.repeats}, seconds")
        print(f"{'':20} {small:>8} {big:>8}   per-layer ratio")
        for name in a:
            ta, tb = _best(a[name], opts.repeats), _best(b[name], opts.repeats)
            print(f"{name:20} {ta:8.3f} {tb:8.3f}   {(tb / big) / (ta / small):6.2f}")


if __name__ == "__main__":
    main()
