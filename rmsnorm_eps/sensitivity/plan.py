"""The passes of ``sensitivity``: the capture pass, the base pass that keeps each decoder
layer's output, the variants that reuse it, and how they are counted.

A change of norm k cannot change what the decoder layers before its first call compute, so a
variant runs only from there: the earlier layers' ``forward`` is replaced, for that run, by a
function returning the base pass's output of the last of them (bit for bit what they would
compute: their inputs did not change). Units counted: a decoder layer that really runs is one,
the rest of the model (embeddings, final norm, head) one more.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.records import ModuleRecord
from rmsnorm_eps.sensitivity.result import Change

__all__ = [
    "Norm",
    "Plan",
    "Variant",
    "capture_pass",
    "counting",
    "decoder_layers",
    "head_timed",
    "min_ratios",
    "padded",
    "reduced",
    "role_of",
    "run_variants",
    "timed",
]

_QK = ("q_norm", "k_norm", "q_layernorm", "k_layernorm", "query_norm", "key_norm")
_ROLES = {
    **dict.fromkeys(_QK, "q/k"),
    "pre_feedforward_layernorm": "pre-feedforward",
    "post_feedforward_layernorm": "post-feedforward",
    "post_attention_layernorm": "post-attention",
    "input_layernorm": "input",
}


def role_of(name: str, layer: int, layers: int) -> str:
    """A norm's role from its name's last part: q/k (q_norm, k_norm, ...), input,
    post-attention, pre-feedforward, post-feedforward (the Hugging Face names), final (a norm
    outside the decoder layers that runs after all of them), else other."""
    role = _ROLES.get(name.rsplit(".", 1)[-1].lower())
    if role is not None:
        return role
    return "final" if layers and layer >= layers else "other"


def decoder_layers(model: Any, norm_names: Sequence[str]) -> tuple[str, list[Any]]:
    """The model's stack of decoder layers: the ``torch.nn.ModuleList`` holding the most norm
    modules (``model.model.layers`` in Hugging Face causal models); ("", []) when none does."""
    import torch

    best: tuple[int, str, list[Any]] = (0, "", [])
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or not len(module):
            continue
        prefix = f"{name}." if name else ""
        inside = sum(1 for n in norm_names if n.startswith(prefix))
        if inside > best[0]:
            best = (inside, name, list(module))
    return best[1], best[2]


@dataclass
class Counter:
    """Units evaluated (see the module docstring); a full pass is ``layers + 1`` units;
    ``heads``: the runs of the rest of the model (embeddings, final norm, head); ``seconds``:
    wall time per phase (:func:`timed`), ``head_calls`` the head calls timed in ``head``."""

    forward: int = 0
    backward: int = 0
    heads: int = 0
    head_calls: int = 0
    #: base passes timed in ``seconds["base"]`` (one per batch, base and round)
    base_passes: int = 0
    #: per batch, the fastest full forward timed (a base pass, or a variant run from layer 0)
    fastest: dict[int, float] = field(default_factory=dict)

    def full_pass(self, batch: int, seconds: float) -> None:
        self.fastest[batch] = min(self.fastest.get(batch, math.inf), seconds)

    seconds: dict[str, float] = field(default_factory=dict)


def _sync(device: Any) -> None:
    """Wait for the device's queued work (a timer must not stop before it ends)."""
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        torch.cuda.synchronize(device)


@contextmanager
def timed(plan: Plan, name: str) -> Iterator[None]:
    """Add the wall time of the block (the device's work included) to ``seconds[name]``."""
    import time

    _sync(plan.device)
    start = time.perf_counter()
    try:
        yield
    finally:
        _sync(plan.device)
        plan.count.seconds[name] = plan.count.seconds.get(name, 0.0) + time.perf_counter() - start


@contextmanager
def head_timed(plan: Plan) -> Iterator[None]:
    """Time every call of the model's output head (``get_output_embeddings()``) into
    ``seconds["head"]`` (nothing when the model names none)."""
    import time

    get = getattr(plan.model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None:
        yield
        return
    start = [0.0]

    def pre(module: Any, args: Any) -> None:
        _sync(plan.device)
        start[0] = time.perf_counter()

    def post(module: Any, args: Any, out: Any) -> None:
        _sync(plan.device)
        c = plan.count
        c.seconds["head"] = c.seconds.get("head", 0.0) + time.perf_counter() - start[0]
        c.head_calls += 1

    with ExitStack() as hooks:
        hooks.enter_context(head.register_forward_pre_hook(pre))
        hooks.enter_context(head.register_forward_hook(post))
        yield


@dataclass
class Variant:
    key: tuple[int, str, str]  # (change index or -1 for a sweep, kind, name)
    change: Change
    targets: list[tuple[Any, ModuleRecord]]
    skip: int
    acc: Any = None


@dataclass
class Norm:
    module: Any
    record: ModuleRecord
    layer: int
    min_ratio: float | None = None


@dataclass
class Plan:
    model: Any
    layers: list[Any]
    norms: list[Norm]
    batches: list[tuple[Any, Any]]
    device: Any
    count: Counter = field(default_factory=Counter)
    #: index of this rank's first batch in the whole job's batches (the screening's draws
    #: are seeded per batch, so they do not depend on the number of ranks)
    first_batch: int = 0
    #: called with (passes done, passes planned) after each run (``MeasureOptions.progress``)
    progress: Callable[[float, float], None] | None = None
    planned: float = 0.0

    def done(self) -> float:
        """Forward-equivalent passes of the texts run so far (a backward counts two)."""
        unit = (len(self.layers) + 1) * max(len(self.batches), 1)
        return (self.count.forward + 2 * self.count.backward) / unit

    def tick(self) -> None:
        if self.progress is not None:
            self.progress(self.done(), max(self.planned, self.done()))


def padded(ids: Sequence[Sequence[int]], samples: Sequence[int], pad: int) -> tuple[Any, Any]:
    """(input ids, attention mask) [B, T] int64 of texts ``samples``, right-padded with ``pad``."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    rows = [torch.tensor(ids[i], dtype=torch.int64) for i in samples]
    input_ids = pad_sequence(rows, batch_first=True, padding_value=pad)
    mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True)
    return input_ids, mask


def logits_of(plan: Plan, ids: Any, mask: Any) -> Any:
    out = plan.model(
        input_ids=ids.to(plan.device), attention_mask=mask.to(plan.device), use_cache=False
    )
    plan.count.forward += 1  # the embeddings, final norm and head
    plan.count.heads += 1
    return out.logits


@contextmanager
def counting(plan: Plan) -> Iterator[None]:
    """Count every decoder layer that really runs (not one whose output is reused)."""

    def pre(module: Any, args: Any) -> None:
        if "forward" not in module.__dict__:
            plan.count.forward += 1

    with ExitStack() as hooks:
        for layer in plan.layers:
            hooks.enter_context(layer.register_forward_pre_hook(pre))
        yield


@contextmanager
def reusing(layers: list[Any], cached: list[Any], skip: int) -> Iterator[None]:
    """Layers 0..skip-1 return the base pass's output of layer skip-1 instead of running
    (only the last one's output reaches layer ``skip``)."""
    if skip <= 0:
        yield
        return
    out = cached[skip - 1]

    def reused(*args: Any, **kwargs: Any) -> Any:
        return out

    for layer in layers[:skip]:
        layer.forward = reused
    try:
        yield
    finally:
        for layer in layers[:skip]:
            del layer.forward


def capture_pass(
    model: Any, layers: list[Any], batches: list[tuple[Any, Any]], device: Any, plan_count: Any
) -> list[Norm]:
    """The capture pass: the norms, their records and the layers finished before each."""
    import torch

    from rmsnorm_eps.capture.hooks import QCapture

    done = [0]
    first: dict[str, int] = {}

    def after(module: Any, args: Any, out: Any) -> None:
        done[0] += 1

    cap = QCapture(model)
    named = dict(model.named_modules())
    with ExitStack() as hooks:
        for layer in layers:
            hooks.enter_context(layer.register_forward_hook(after))
        for st in cap._states:  # the capture's own module list, in model order
            name = st.spec.name

            def pre(module: Any, args: Any, name: str = name) -> None:
                first.setdefault(name, done[0])

            hooks.enter_context(named[name].register_forward_pre_hook(pre))
        with cap, torch.no_grad():
            for ids, mask in batches:
                done[0] = 0
                model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
                plan_count.forward += len(layers) + 1
                plan_count.heads += 1
    result = cap.result()
    norms = []
    for rec in result.modules:
        if rec.norm not in ("rms", "layer", "gated-rms", "l2") or not rec.count:
            continue
        norms.append(Norm(named[rec.name], rec, first.get(rec.name, 0)))
    if not norms:
        raise CaptureError("no norm module of a known kind ran: nothing to change")
    return norms


def min_ratios(norms: list[Norm], base_eps: Callable[[Norm], float], device: Any) -> None:
    """min q/eps per norm over every real token (and rank)."""
    import numpy as np

    vals = []
    for n in norms:
        q = n.record.q
        eps = base_eps(n)
        finite = q[np.isfinite(q)] if q is not None else np.empty(0)
        vals.append(float(finite.min()) / eps if finite.size and eps > 0 else math.inf)
    for n, v in zip(norms, reduced(vals, device, "MIN"), strict=True):
        n.min_ratio = None if math.isinf(v) else v


def run_variants(plan: Plan, variants: list[Variant], base_acc: Any) -> None:
    """Every batch: per distinct base, a base pass keeping each layer's output, then each
    variant from its first changeable layer, compared on the device."""
    import torch

    from rmsnorm_eps.sensitivity.metrics import Accumulator, Base, nll_sums
    from rmsnorm_eps.sensitivity.swap import applied

    everyone = [(n.module, n.record) for n in plan.norms]
    groups: dict[str | None, list[Variant]] = {}
    for v in variants:
        v.acc = Accumulator(plan.device)
        groups.setdefault(None if v.change.attribute else v.change.base, []).append(v)
    for b, (ids, mask) in enumerate(plan.batches):
        for base, members in groups.items():
            cached: list[Any] = [None] * len(plan.layers)
            with torch.no_grad(), ExitStack() as stack:
                for i, layer in enumerate(plan.layers):

                    def keep(
                        module: Any, args: Any, out: Any, i: int = i, cached: list[Any] = cached
                    ) -> None:
                        cached[i] = out

                    stack.enter_context(layer.register_forward_hook(keep))
                if base is not None:
                    stack.enter_context(applied(members[0].change, "base", everyone))
                before = plan.count.seconds.get("base", 0.0)
                with timed(plan, "base"):
                    base_logits = logits_of(plan, ids, mask)
                plan.count.base_passes += 1
                plan.count.full_pass(b, plan.count.seconds["base"] - before)
            with timed(plan, "metric"):
                prepared = Base(base_logits, ids, mask)
            # the base's perplexity: the model as it is when a change is made from it, else
            # the --from SPEC's
            if base_acc is not None and base == next(iter(sorted(groups, key=_as_is_first))):
                nll, n = nll_sums(base_logits, ids, mask)
                base_acc[0] += nll
                base_acc[1] += n
            for v in members:
                changed = {id(m) for m, _ in v.targets}
                rest = [(m, r) for m, r in everyone if id(m) not in changed]
                with torch.no_grad(), ExitStack() as stack:
                    if base is not None:
                        stack.enter_context(applied(v.change, "base", rest))
                    stack.enter_context(applied(v.change, "to", v.targets))
                    stack.enter_context(reusing(plan.layers, cached, v.skip))
                    start = time.perf_counter()
                    new = logits_of(plan, ids, mask)
                    if v.skip == 0:  # a full forward: one more sample of a pass's time
                        _sync(plan.device)
                        plan.count.full_pass(b, time.perf_counter() - start)
                with timed(plan, "metric"):
                    v.acc.add_prepared(prepared, new)
                plan.tick()


def _as_is_first(base: str | None) -> tuple[bool, str]:
    return (base is not None, base or "")


def reduced(values: list[float], device: Any, op: str = "SUM") -> list[float]:
    """``values`` all-reduced (``op``: SUM or MIN) over the ranks of a torch.distributed job
    (as they are without one), as float64 on ``device``."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    out: list[float] = t.cpu().tolist()
    return out
