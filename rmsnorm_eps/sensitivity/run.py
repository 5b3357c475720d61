"""Measuring what an eps change does to a causal language model's outputs.

Passes, per batch of texts (see :class:`~rmsnorm_eps.sensitivity.result.PassCount` for how
they are counted):

1. one capture pass (:class:`~rmsnorm_eps.capture.hooks.QCapture`): which modules are norms,
   what they compute, their live eps, min q/eps, and for each norm how many decoder layers
   have finished when it first runs (its ``layer``);
2. with ``exact_top`` K: the screening (:mod:`rmsnorm_eps.sensitivity.screen`), one forward
   with gradients and ``samples`` backward passes for every norm together;
3. a base pass per distinct base (the model as it is, or every norm under a ``--from`` SPEC)
   that keeps each decoder layer's output; then each variant (the change in every norm, in one
   norm, in one role, at one sweep point) runs only from the first layer it can change: the
   layers before return the base pass's output of the last of them (identical to what they
   would compute: their inputs did not change). The logits of every variant are compared with
   the base's on the device (:class:`~rmsnorm_eps.sensitivity.metrics.Accumulator`).

Exact rows are exact: a reused layer output is bit for bit the output the layer would give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.records import ModuleRecord
from rmsnorm_eps.sensitivity.result import (
    Change,
    ChangeResult,
    Metrics,
    NormInfo,
    NormRow,
    PassCount,
    SensitivityResult,
    Suggestion,
    kl_fails,
    top1_fails,
)

__all__ = ["SWEEP_FACTORS", "decoder_layers", "measure", "role_of"]

#: ``--suggest`` sweeps eps0 * 10**(k/2), k = -6..6 (k != 0): decades and half-decades.
SWEEP_FACTORS = tuple(10.0 ** (k / 2) for k in range(-6, 7) if k != 0)

_QK = ("q_norm", "k_norm", "q_layernorm", "k_layernorm", "query_norm", "key_norm")
_ROLES = (
    ("pre_feedforward_layernorm", "pre-feedforward"),
    ("post_feedforward_layernorm", "post-feedforward"),
    ("post_attention_layernorm", "post-attention"),
    ("input_layernorm", "input"),
)


def role_of(name: str, layer: int, layers: int) -> str:
    """A norm's role from its name's last part: q/k (q_norm, k_norm, ...), input,
    post-attention, pre-feedforward, post-feedforward (the Hugging Face names), final (a norm
    outside the decoder layers that runs after all of them), else other."""
    last = name.rsplit(".", 1)[-1].lower()
    if last in _QK:
        return "q/k"
    for suffix, role in _ROLES:
        if last == suffix:
            return role
    if layers and layer >= layers:
        return "final"
    return "other"


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
class _Counter:
    """Units evaluated: a decoder layer is one, the rest of the model (embeddings, final norm,
    head) one more; a full pass is ``layers + 1`` units."""

    forward: int = 0
    backward: int = 0


@dataclass
class _Variant:
    key: tuple[int, str, str]  # (change index or -1 for a sweep, kind, name)
    change: Change
    targets: list[tuple[Any, ModuleRecord]]
    skip: int
    acc: Any = None


@dataclass
class _Norm:
    module: Any
    record: ModuleRecord
    layer: int
    min_ratio: float | None = None


@dataclass
class _Plan:
    model: Any
    layers: list[Any]
    norms: list[_Norm]
    batches: list[tuple[Any, Any]]
    device: Any
    count: _Counter = field(default_factory=_Counter)


def _padded(ids: Sequence[Sequence[int]], samples: Sequence[int], pad: int) -> tuple[Any, Any]:
    import torch

    rows = [ids[i] for i in samples]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for j, r in enumerate(rows):
        input_ids[j, : len(r)] = torch.tensor(r, dtype=torch.int64)
        mask[j, : len(r)] = 1
    return input_ids, mask


def _logits(plan: _Plan, ids: Any, mask: Any) -> Any:
    out = plan.model(
        input_ids=ids.to(plan.device), attention_mask=mask.to(plan.device), use_cache=False
    )
    plan.count.forward += 1  # the embeddings, final norm and head
    return out.logits


@contextmanager
def _counting(plan: _Plan) -> Iterator[None]:
    """Count every decoder layer that really runs (not one whose output is reused)."""
    handles = []

    def pre(module: Any, args: Any) -> None:
        if "forward" not in module.__dict__:
            plan.count.forward += 1

    for layer in plan.layers:
        handles.append(layer.register_forward_pre_hook(pre))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _reusing(layers: list[Any], cached: list[Any], skip: int) -> Iterator[None]:
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


def _capture_pass(
    model: Any, layers: list[Any], batches: list[tuple[Any, Any]], device: Any, plan_count: Any
) -> list[_Norm]:
    """The capture pass: the norms, their records and the layers finished before each."""
    import torch

    from rmsnorm_eps.capture.hooks import QCapture

    done = [0]
    first: dict[str, int] = {}
    handles = []

    def after(module: Any, args: Any, out: Any) -> None:
        done[0] += 1

    for layer in layers:
        handles.append(layer.register_forward_hook(after))
    cap = QCapture(model)
    named = dict(model.named_modules())
    for st in cap._states:  # the capture's own module list, in model order
        name = st.spec.name

        def pre(module: Any, args: Any, name: str = name) -> None:
            first.setdefault(name, done[0])

        handles.append(named[name].register_forward_pre_hook(pre))
    try:
        with cap, torch.no_grad():
            for ids, mask in batches:
                done[0] = 0
                model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
                plan_count.forward += len(layers) + 1
    finally:
        for h in handles:
            h.remove()
    result = cap.result()
    norms = []
    for rec in result.modules:
        if rec.norm not in ("rms", "layer", "gated-rms", "l2") or not rec.count:
            continue
        norms.append(_Norm(named[rec.name], rec, first.get(rec.name, 0)))
    if not norms:
        raise CaptureError("no norm module of a known kind ran: nothing to change")
    return norms


def _min_ratios(norms: list[_Norm], base_eps: Callable[[_Norm], float]) -> None:
    """min q/eps per norm over every real token (and rank)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    vals = []
    for n in norms:
        q = n.record.q
        eps = base_eps(n)
        finite = q[np.isfinite(q)] if q is not None else np.empty(0)
        vals.append(float(finite.min()) / eps if finite.size and eps > 0 else math.inf)
    if dist.is_available() and dist.is_initialized():
        t = torch.tensor(vals, dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        vals = t.cpu().tolist()
    for n, v in zip(norms, vals, strict=True):
        n.min_ratio = None if math.isinf(v) else v


def _run_variants(plan: _Plan, variants: list[_Variant], base_acc: Any) -> None:
    """Every batch: per distinct base, a base pass keeping each layer's output, then each
    variant from its first changeable layer, compared on the device."""
    import torch

    from rmsnorm_eps.sensitivity.metrics import Accumulator, nll_sums
    from rmsnorm_eps.sensitivity.swap import applied

    everyone = [(n.module, n.record) for n in plan.norms]
    groups: dict[str | None, list[_Variant]] = {}
    for v in variants:
        v.acc = Accumulator(plan.device)
        groups.setdefault(None if v.change.attribute else v.change.base, []).append(v)
    for ids, mask in plan.batches:
        for base, members in groups.items():
            cached: list[Any] = [None] * len(plan.layers)
            handles = []
            for i, layer in enumerate(plan.layers):

                def keep(
                    module: Any, args: Any, out: Any, i: int = i, cached: list[Any] = cached
                ) -> None:
                    cached[i] = out

                handles.append(layer.register_forward_hook(keep))
            lead = members[0].change
            try:
                with torch.no_grad(), ExitStack() as stack:
                    if base is not None:
                        stack.enter_context(applied(lead, "base", everyone))
                    base_logits = _logits(plan, ids, mask)
            finally:
                for h in handles:
                    h.remove()
            base_lp = torch.log_softmax(base_logits.double(), dim=-1)
            if base is None and base_acc is not None:
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
                    stack.enter_context(_reusing(plan.layers, cached, v.skip))
                    new = _logits(plan, ids, mask)
                v.acc.add(base_logits, new, ids, mask, base_lp)


def _rows(
    change_index: int,
    kind: str,
    names: Sequence[tuple[str, str, float | None]],
    exact: dict[tuple[int, str, str], Metrics],
    estimates: dict[str, float] | None,
) -> tuple[NormRow, ...]:
    """The rows of one change (exact first, by KL; then the estimates), with shares."""
    rows: list[tuple[str, str, float | None, bool, float | None, Metrics | None]] = []
    for name, role, ratio in names:
        m = exact.get((change_index, kind, name))
        if m is not None:
            rows.append((name, role, m.kl, False, ratio, m))
        elif estimates is not None:
            rows.append((name, role, estimates.get(name), True, ratio, None))
    total = sum(r[2] for r in rows if r[2] is not None and math.isfinite(r[2]))

    def key(r: tuple[Any, ...]) -> tuple[int, float]:
        kl = r[2] if r[2] is not None and not math.isnan(r[2]) else -math.inf
        return (1 if r[3] else 0, -kl)

    return tuple(
        NormRow(
            name=name,
            role=role,
            kl=kl,
            estimated=est,
            share=(kl / total if kl is not None and total > 0 else None),
            min_q_over_eps=ratio,
            metrics=m,
        )
        for name, role, kl, est, ratio, m in sorted(rows, key=key)
    )


def _reduced(values: list[float], device: Any) -> list[float]:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    out: list[float] = t.cpu().tolist()
    return out


def measure(
    loaded: Any,
    texts: Sequence[str],
    changes: Sequence[Change],
    *,
    per_norm: bool = False,
    per_role: bool = False,
    exact_top: int | None = None,
    suggest_max_kl: float | None = None,
    suggest_min_top1: float | None = None,
    max_tokens: int | None = None,
    batch_size: int = 8,
    samples: int = 8,
    seed: int = 0,
    rank: int = 0,
    world: int = 1,
) -> SensitivityResult:
    """Run ``texts`` through ``loaded`` (:func:`rmsnorm_eps.capture.loading.load_model`) as it
    is and under each change; see the module docstring. ``exact_top`` K: screen every norm
    (``samples`` backward passes) and measure the K largest exactly; ``suggest_max_kl``: sweep
    eps (:data:`SWEEP_FACTORS` times the configured eps) for the model and per role. Under
    torch.distributed each rank runs its contiguous share of the batches (``rank``/``world``)
    and the sums are all-reduced."""
    import torch

    from rmsnorm_eps.capture.inputs import plan_batches, shard_batches, tokenize
    from rmsnorm_eps.capture.loading import input_device
    from rmsnorm_eps.sensitivity.swap import spec_of

    if loaded.family != "causal":
        raise CaptureError(
            f"sensitivity compares next-token predictions: it needs a causal language model, "
            f"not an {loaded.family} model"
        )
    if not texts:
        raise CaptureError("no text to run")
    if exact_top is not None and exact_top < 1:
        raise CaptureError("exact_top must be >= 1")
    model = loaded.model
    ids = tokenize(loaded.tokenizer, texts, max_tokens)
    vocab = getattr(model.config, "vocab_size", None)
    top = max(max(r) for r in ids)
    if vocab is not None and top >= vocab:
        raise CaptureError(
            f"the tokenizer produced token id {top} >= the model's vocab_size {vocab}: "
            "tokenizer and model do not match"
        )
    plan_all = plan_batches([len(r) for r in ids], batch_size, sort=False)
    if len(plan_all) < world:
        raise CaptureError(f"{len(plan_all)} batch(es) cannot be shared by {world} ranks")
    mine = shard_batches(plan_all, rank, world)
    pad = loaded.tokenizer.pad_token_id
    batches = [_padded(ids, b.samples, int(pad if pad is not None else 0)) for b in mine]
    device = input_device(model)
    from rmsnorm_eps.capture.modules import find_norm_modules

    candidates = [m.name for m in find_norm_modules(model)]
    _, layers = decoder_layers(model, candidates)
    plan = _Plan(model, layers, [], batches, device)
    plan.norms = _capture_pass(model, layers, batches, device, plan.count)
    n_layers = len(layers)

    def base_eps(n: _Norm) -> float:
        first = changes[0] if changes else None
        if first is not None and not first.attribute and first.base is not None:
            return spec_of(first.base, "--from").eps
        return float(n.record.eps or 0.0)

    _min_ratios(plan.norms, base_eps)
    infos = tuple(
        NormInfo(
            name=n.record.name,
            class_name=n.record.class_name,
            norm=str(n.record.norm),
            eps=float(n.record.eps or 0.0),
            role=role_of(n.record.name, n.layer, n_layers),
            min_q_over_eps=n.min_ratio,
            layer=n.layer,
        )
        for n in plan.norms
    )
    by_role: dict[str, list[int]] = {}
    for i, info in enumerate(infos):
        by_role.setdefault(info.role, []).append(i)

    def targets(idx: Sequence[int]) -> list[tuple[Any, ModuleRecord]]:
        return [(plan.norms[i].module, plan.norms[i].record) for i in idx]

    def skip(idx: Sequence[int]) -> int:
        return min(plan.norms[i].layer for i in idx) if idx else 0

    every = list(range(len(plan.norms)))
    estimates: dict[int, dict[str, float]] = {}
    tokens_other = 0
    exact_norms: dict[int, list[int]] = {c: every for c in range(len(changes))}
    with _counting(plan):
        if per_norm and exact_top is not None and exact_top < len(plan.norms):
            from rmsnorm_eps.sensitivity.screen import screen

            est, tokens_other = screen(plan, changes, samples, seed)
            for ci in range(len(changes)):
                estimates[ci] = {infos[i].name: est[ci][i] / max(tokens_other, 1) for i in every}
                row: list[float] = est[ci]
                order = sorted(every, key=lambda i: -row[i])
                exact_norms[ci] = sorted(order[:exact_top])
        variants: list[_Variant] = []
        for ci, change in enumerate(changes):
            variants.append(_Variant((ci, "all", ""), change, targets(every), skip(every)))
            if per_norm:
                for i in exact_norms[ci]:
                    variants.append(
                        _Variant((ci, "norm", infos[i].name), change, targets([i]), skip([i]))
                    )
            if per_role:
                for role, idx in by_role.items():
                    variants.append(_Variant((ci, "role", role), change, targets(idx), skip(idx)))
        sweep_eps: dict[str, float] = {}
        if suggest_max_kl is not None:
            groups = {"model": every, **by_role}
            for group, idx in groups.items():
                eps0 = _configured_eps([infos[i].eps for i in idx])
                sweep_eps[group] = eps0
                for f in SWEEP_FACTORS:
                    value = eps0 * f
                    ch = Change(f"eps={value:.6g}", None, f"eps={value!r}", True)
                    variants.append(_Variant((-1, group, repr(value)), ch, targets(idx), skip(idx)))
        base_acc = [
            torch.zeros((), dtype=torch.float64, device=device),
            torch.zeros((), dtype=torch.float64, device=device),
        ]
        _run_variants(plan, variants, base_acc)
    exact = {v.key: v.acc.metrics() for v in variants}
    nll, n_nll = _reduced([float(base_acc[0]), float(base_acc[1])], device)
    ppl_base = math.exp(nll / n_nll) if n_nll else None
    if not any(c.attribute for c in changes):
        ppl_base = None  # a --from SPEC's base is not the model as it is
    results = []
    names = [(i.name, i.role, i.min_q_over_eps) for i in infos]
    roles = [(r, r, _min(infos, idx)) for r, idx in by_role.items()]
    for ci, change in enumerate(changes):
        results.append(
            ChangeResult(
                change=change,
                all=exact[(ci, "all", "")],
                per_norm=_rows(ci, "norm", names, exact, estimates.get(ci)) if per_norm else (),
                per_role=_rows(ci, "role", roles, exact, None) if per_role else (),
            )
        )
    suggestions = tuple(
        _suggest(group, eps0, exact, suggest_max_kl, suggest_min_top1)
        for group, eps0 in sweep_eps.items()
    )
    sums = _reduced(
        [
            float(plan.count.forward),
            float(plan.count.backward),
            float(len(batches)),
            float(sum(int(m.sum()) for _, m in batches)),
            float(sum(int(m.shape[0]) for _, m in batches)),
        ],
        device,
    )
    unit = (n_layers + 1) * max(sums[2], 1.0)
    fwd, bwd = sums[0] / unit, sums[1] / unit
    base_passes = 1 + len({c.base for c in changes if not c.attribute})
    rows_naive = sum(
        1 + (len(plan.norms) if per_norm else 0) + (len(by_role) if per_role else 0)
        for _ in changes
    )
    naive = float(base_passes + rows_naive + len(sweep_eps) * len(SWEEP_FACTORS))
    passes = PassCount(fwd, bwd, fwd + 2 * bwd, naive, n_layers, int(sums[2]))
    first = results[0].all if results else None
    return SensitivityResult(
        model=loaded.name,
        source=loaded.source,
        texts=len(texts),
        tokens=int(sums[3]),
        tokens_first=first.tokens_first if first else int(sums[4]),
        norms=infos,
        changes=tuple(results),
        perplexity_base=ppl_base,
        passes=passes,
        suggestions=suggestions,
        screen_samples=samples if estimates else 0,
        ranks=world,
    )


def _min(infos: Sequence[NormInfo], idx: Sequence[int]) -> float | None:
    vals = [infos[i].min_q_over_eps for i in idx if infos[i].min_q_over_eps is not None]
    return min(vals) if vals else None  # type: ignore[type-var]


def _configured_eps(values: Sequence[float]) -> float:
    """The most common live eps of a group (the smallest of the most common)."""
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return min(counts, key=lambda v: (-counts[v], v))


def _suggest(
    group: str,
    eps0: float,
    exact: dict[tuple[int, str, str], Metrics],
    max_kl: float | None,
    min_top1: float | None,
) -> Suggestion:
    """Walk the sweep up and down from eps0 while every point passes."""
    points = sorted((eps0 * f, exact[(-1, group, repr(eps0 * f))]) for f in SWEEP_FACTORS)

    def ok(m: Metrics) -> bool:
        return not kl_fails(m, max_kl) and not top1_fails(m, min_top1)

    largest: float | None = eps0
    for value, m in (p for p in points if p[0] > eps0):
        if not ok(m):
            break
        largest = value
    smallest: float | None = eps0
    for value, m in (p for p in reversed(points) if p[0] < eps0):
        if not ok(m):
            break
        smallest = value
    return Suggestion(
        group=group,
        eps=eps0,
        largest=largest,
        smallest=smallest,
        points=tuple((v, m.kl, m.kl_first) for v, m in points),
    )
