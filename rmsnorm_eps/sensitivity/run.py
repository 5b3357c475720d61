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
   norm, in one role, at one sweep point) runs only from the first layer it can change, reusing
   the base pass's output bit for bit (:mod:`rmsnorm_eps.sensitivity.plan`). The logits of
   every variant are compared with the base's on the device
   (:class:`~rmsnorm_eps.sensitivity.metrics.Accumulator`).
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.records import ModuleRecord
from rmsnorm_eps.sensitivity.plan import (
    Norm,
    Plan,
    Variant,
    capture_pass,
    counting,
    decoder_layers,
    head_timed,
    min_ratios,
    padded,
    reduced,
    role_of,
    run_variants,
)
from rmsnorm_eps.sensitivity.result import (
    Change,
    ChangeResult,
    Metrics,
    NormInfo,
    NormRow,
    PassCount,
    ScreenCheck,
    SensitivityResult,
    Suggestion,
    Timing,
    kl_fails,
    top1_fails,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["SWEEP_FACTORS", "MeasureFields", "MeasureOptions", "measure"]

#: ``--suggest`` sweeps eps0 * 10**(k/2), k = -6..6 (k != 0): decades and half-decades.
SWEEP_FACTORS = tuple(10.0 ** (k / 2) for k in range(-6, 7) if k != 0)


def _plan(loaded: Any, texts: Sequence[str], o: MeasureOptions) -> Plan:
    """Tokenize, batch this rank's share, find the decoder layers, run the capture pass."""
    from rmsnorm_eps.capture.inputs import plan_batches, shard_batches, tokenize
    from rmsnorm_eps.capture.loading import input_device
    from rmsnorm_eps.capture.modules import find_norm_modules

    if loaded.family != "causal":
        raise CaptureError(
            f"sensitivity compares next-token predictions: it needs a causal language model, "
            f"not an {loaded.family} model"
        )
    if not texts:
        raise CaptureError("no text to run")
    model = loaded.model
    ids = tokenize(loaded.tokenizer, texts, o.max_tokens)
    vocab = getattr(model.config, "vocab_size", None)
    top = max(max(r) for r in ids)
    if vocab is not None and top >= vocab:
        raise CaptureError(
            f"the tokenizer produced token id {top} >= the model's vocab_size {vocab}: "
            "tokenizer and model do not match"
        )
    every = plan_batches([len(r) for r in ids], o.batch_size, sort=False)
    if len(every) < o.world:
        raise CaptureError(f"{len(every)} batch(es) cannot be shared by {o.world} ranks")
    pad = loaded.tokenizer.pad_token_id
    pad_id = int(pad if pad is not None else 0)
    batches = [padded(ids, b.samples, pad_id) for b in shard_batches(every, o.rank, o.world)]
    _, layers = decoder_layers(model, [m.name for m in find_norm_modules(model)])
    base, extra = divmod(len(every), o.world)
    first = o.rank * base + min(o.rank, extra)  # shard_batches' contiguous runs
    plan = Plan(model, layers, [], batches, input_device(model), first_batch=first)
    plan.progress = o.progress
    plan.norms = capture_pass(model, layers, batches, plan.device, plan.count)
    return plan


def _infos(plan: Plan, changes: Sequence[Change]) -> tuple[NormInfo, ...]:
    """Each norm's facts; min q/eps against the base's eps (a --from SPEC's when given)."""
    from rmsnorm_eps.sensitivity.swap import spec_of

    first = changes[0] if changes else None
    from_eps = None
    if first is not None and not first.attribute and first.base is not None:
        from_eps = spec_of(first.base, "--from").eps

    def base_eps(n: Norm) -> float:
        return from_eps if from_eps is not None else float(n.record.eps or 0.0)

    min_ratios(plan.norms, base_eps, plan.device)
    return tuple(
        NormInfo(
            name=n.record.name,
            class_name=n.record.class_name,
            norm=str(n.record.norm),
            eps=float(n.record.eps or 0.0),
            role=role_of(n.record.name, n.layer, len(plan.layers)),
            min_q_over_eps=n.min_ratio,
            layer=n.layer,
        )
        for n in plan.norms
    )


Estimated = dict[int, dict[str, float]]


def _screened(
    plan: Plan, infos: Sequence[NormInfo], changes: Sequence[Change], o: MeasureOptions
) -> tuple[dict[int, list[int]], Estimated, Estimated]:
    """The norms to measure exactly per change (all, or the ``exact_top`` largest estimates),
    the estimates (mean KL at positions >= 1) and their standard errors when the screening
    ran."""
    every = list(range(len(plan.norms)))
    exact = {c: every for c in range(len(changes))}
    if not (o.per_norm and o.exact_top is not None and o.exact_top < len(every)):
        return exact, {}, {}
    from rmsnorm_eps.sensitivity.screen import screen

    found = screen(plan, changes, o.samples, o.seed)
    n = max(found.tokens, 1)
    estimates, errors = {}, {}
    for ci in range(len(changes)):
        row: list[float] = found.sums[ci]
        estimates[ci] = {infos[i].name: row[i] / n for i in every}
        errors[ci] = {infos[i].name: found.errors[ci][i] / n for i in every}
        exact[ci] = sorted(sorted(every, key=lambda i: -row[i])[: o.exact_top])
    return exact, estimates, errors


def _extend(
    plan: Plan,
    infos: Sequence[NormInfo],
    changes: Sequence[Change],
    o: MeasureOptions,
    variants: list[Variant],
    screened: tuple[Estimated, Estimated],
) -> tuple[dict[int, ScreenCheck], dict[int, set[str]]]:
    """Measure past ``exact_top`` until every other norm is clearly below the K-th exact row
    (:mod:`rmsnorm_eps.sensitivity.extend`), at most 2 K exact rows; the checks and the rows
    left uncertain, per change."""
    from rmsnorm_eps.sensitivity.extend import extension

    estimates, errors = screened
    checks: dict[int, ScreenCheck] = {}
    left: dict[int, set[str]] = {}
    if not estimates or o.exact_top is None:
        return checks, left
    index = {info.name: i for i, info in enumerate(infos)}
    limit = min(2 * o.exact_top, len(infos))
    while True:
        done = {v.key: v.acc.metrics().kl for v in variants}
        more: list[Variant] = []
        for ci in estimates:
            exact = {k[2]: kl for k, kl in done.items() if k[:2] == (ci, "norm")}
            take, checks[ci], left[ci] = extension(
                o.exact_top, exact, estimates[ci], errors[ci], limit
            )
            more += [
                _variant(plan, (ci, "norm", name), changes[ci], [index[name]]) for name in take
            ]
        if not more:
            return checks, left
        plan.planned = plan.done() + _planned(plan, more)
        run_variants(plan, more, None)
        variants += more


def _variants(
    plan: Plan,
    infos: Sequence[NormInfo],
    changes: Sequence[Change],
    o: MeasureOptions,
    exact_norms: dict[int, list[int]],
) -> tuple[list[Variant], dict[str, float]]:
    """Every run to make: per change in every norm, each exact norm, each role; the sweep."""
    by_role = _by_role(infos)

    def variant(key: tuple[int, str, str], change: Change, idx: Sequence[int]) -> Variant:
        return _variant(plan, key, change, idx)

    every = list(range(len(plan.norms)))
    out: list[Variant] = []
    for ci, change in enumerate(changes):
        out.append(variant((ci, "all", ""), change, every))
        if o.per_norm:
            out += [variant((ci, "norm", infos[i].name), change, [i]) for i in exact_norms[ci]]
        if o.per_role:
            out += [variant((ci, "role", r), change, idx) for r, idx in by_role.items()]
    sweep: dict[str, float] = {}
    if o.suggest_max_kl is not None:
        for group, idx in {"model": every, **by_role}.items():
            eps0 = _configured_eps([infos[i].eps for i in idx])
            sweep[group] = eps0
            for f in SWEEP_FACTORS:
                value = eps0 * f
                ch = Change(f"eps={value:.6g}", None, f"eps={value!r}", True)
                out.append(variant((-1, group, repr(value)), ch, idx))
    return out, sweep


def _planned(plan: Plan, variants: Sequence[Variant]) -> float:
    """The passes of the texts ``variants`` will run: a base pass per distinct base, and
    each variant from its first changeable layer."""
    n = len(plan.layers) + 1
    bases = {None if v.change.attribute else v.change.base for v in variants}
    return len(bases) + sum((n - v.skip) / n for v in variants)


def _variant(plan: Plan, key: tuple[int, str, str], change: Change, idx: Sequence[int]) -> Variant:
    """The run of ``change`` in the norms ``idx``, from the first layer they can change."""
    targets: list[tuple[Any, ModuleRecord]] = [
        (plan.norms[i].module, plan.norms[i].record) for i in idx
    ]
    skip = min(plan.norms[i].layer for i in idx) if idx else 0
    return Variant(key, change, targets, skip)


def _by_role(infos: Sequence[NormInfo]) -> dict[str, list[int]]:
    by_role: dict[str, list[int]] = {}
    for i, info in enumerate(infos):
        by_role.setdefault(info.role, []).append(i)
    return by_role


def _passes(
    plan: Plan,
    changes: Sequence[Change],
    o: MeasureOptions,
    sweep: dict[str, float],
    roles: int,
    seconds: float,
) -> tuple[PassCount, int]:
    """The cost (all ranks) and the real tokens run."""
    sums = reduced(
        [
            float(plan.count.forward),
            float(plan.count.backward),
            float(len(plan.batches)),
            float(sum(int(m.sum()) for _, m in plan.batches)),
        ],
        plan.device,
    )
    unit = (len(plan.layers) + 1) * max(sums[2], 1.0)
    fwd, bwd = sums[0] / unit, sums[1] / unit
    bases = 1 + len({c.base for c in changes if not c.attribute})
    rows = len(plan.norms) * o.per_norm + roles * o.per_role
    naive = float(bases + len(changes) * (1 + rows) + len(sweep) * len(SWEEP_FACTORS))
    timing = _timing(plan, seconds)
    count = PassCount(fwd, bwd, fwd + 2 * bwd, naive, len(plan.layers), int(sums[2]), timing)
    return count, int(sums[3])


def _timing(plan: Plan, seconds: float) -> Timing | None:
    """This process's cost in forward-pass times (see :class:`Timing`); None when no base
    pass was timed."""
    c = plan.count
    batches = max(len(plan.batches), 1)
    # a forward pass of the texts: per batch the fastest full forward timed (a base pass or
    # a variant from layer 0: one sample alone may be a cold or disturbed one), summed
    t_pass = sum(c.fastest.values()) if c.fastest else 0.0
    if t_pass <= 0:
        return None
    t_head = c.seconds.get("head", 0.0) / c.head_calls * batches if c.head_calls else 0.0
    share = min(t_head / t_pass, 1.0)
    layer_passes = (c.forward - c.heads) / (max(len(plan.layers), 1) * batches)
    return Timing(
        pass_seconds=t_pass,
        seconds=seconds,
        layers=layer_passes * (1.0 - share),
        head=c.heads / batches * share,
        metric=c.seconds.get("metric", 0.0) / t_pass,
        screen=c.seconds.get("screen", 0.0) / t_pass,
    )


@dataclass(frozen=True)
class MeasureOptions:
    """What :func:`measure` is asked beyond the changes: ``per_norm`` / ``per_role`` rows,
    ``exact_top`` K (screen every norm with ``samples`` backward passes seeded by ``seed``,
    measure the K largest exactly), the eps sweep's targets ``suggest_max_kl`` /
    ``suggest_min_top1``, ``max_tokens`` per text, ``batch_size`` texts per forward pass,
    this process's ``rank`` among ``world`` (torch.distributed) and a ``progress`` callback."""

    per_norm: bool = False
    per_role: bool = False
    exact_top: int | None = None
    suggest_max_kl: float | None = None
    suggest_min_top1: float | None = None
    max_tokens: int | None = None
    batch_size: int = 8
    samples: int = 8
    seed: int = 0
    rank: int = 0
    world: int = 1
    #: called with (passes of the texts done, planned) after each run; None: nothing
    progress: Callable[[float, float], None] | None = None


class MeasureFields(TypedDict, total=False):
    """:class:`MeasureOptions`' fields as keyword arguments of :func:`measure`."""

    per_norm: bool
    per_role: bool
    exact_top: int | None
    suggest_max_kl: float | None
    suggest_min_top1: float | None
    max_tokens: int | None
    batch_size: int
    samples: int
    seed: int
    rank: int
    world: int
    progress: Callable[[float, float], None] | None


def measure(
    loaded: Any,
    texts: Sequence[str],
    changes: Sequence[Change],
    **fields: Unpack[MeasureFields],
) -> SensitivityResult:
    """Run ``texts`` through ``loaded`` (:func:`rmsnorm_eps.capture.loading.load_model`) as it
    is and under each change; see the module docstring. The keywords are
    :class:`MeasureOptions`' fields; the sweep is :data:`SWEEP_FACTORS` times the configured
    eps, for the model and per role. Under torch.distributed each rank runs its contiguous
    share of the batches (``rank``/``world``) and the sums are all-reduced."""
    import torch

    o = MeasureOptions(**fields)
    if o.exact_top is not None and o.exact_top < 1:
        raise CaptureError("exact_top must be >= 1")
    start = time.perf_counter()
    plan = _plan(loaded, texts, o)
    infos = _infos(plan, changes)
    with counting(plan), head_timed(plan):
        exact_norms, estimates, errors = _screened(plan, infos, changes, o)
        variants, sweep = _variants(plan, infos, changes, o, exact_norms)
        plan.planned = plan.done() + _planned(plan, variants)
        base_acc = [torch.zeros((), dtype=torch.float64, device=plan.device) for _ in "nc"]
        run_variants(plan, variants, base_acc)
        checks, uncertain = _extend(plan, infos, changes, o, variants, (estimates, errors))
    exact = {v.key: v.acc.metrics() for v in variants}
    nll, n_nll = reduced([float(base_acc[0]), float(base_acc[1])], plan.device)
    # a --from SPEC's base is not the model as it is: its perplexity is the SPEC's
    as_is = any(c.attribute for c in changes)
    by_role = _by_role(infos)
    names = [(i.name, i.role, i.min_q_over_eps) for i in infos]
    roles = [(r, r, _min(infos, idx)) for r, idx in by_role.items()]
    results = tuple(
        ChangeResult(
            change=change,
            all=exact[(ci, "all", "")],
            per_norm=_rows(ci, "norm", names, exact, estimates.get(ci), uncertain.get(ci))
            if o.per_norm
            else (),
            per_role=_rows(ci, "role", roles, exact, None) if o.per_role else (),
            screen=checks.get(ci),
        )
        for ci, change in enumerate(changes)
    )
    passes, tokens = _passes(plan, changes, o, sweep, len(by_role), time.perf_counter() - start)
    return SensitivityResult(
        model=loaded.name,
        source=loaded.source,
        texts=len(texts),
        tokens=tokens,
        tokens_first=results[0].all.tokens_first if results else 0,
        norms=infos,
        changes=results,
        perplexity_base=math.exp(nll / n_nll) if n_nll else None,
        perplexity_base_from=None if as_is or not changes else changes[0].base,
        passes=passes,
        suggestions=tuple(
            _suggest(group, eps0, exact, o.suggest_max_kl, o.suggest_min_top1)
            for group, eps0 in sweep.items()
        ),
        screen_samples=o.samples if estimates else 0,
        ranks=o.world,
    )


def _rows(
    change_index: int,
    kind: str,
    names: Sequence[tuple[str, str, float | None]],
    exact: dict[tuple[int, str, str], Metrics],
    estimates: dict[str, float] | None,
    uncertain: set[str] | None = None,
) -> tuple[NormRow, ...]:
    """The rows of one change (exact first, by KL; then the estimates, ``uncertain`` ones
    marked), with shares."""
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
            uncertain=est and name in (uncertain or ()),
        )
        for name, role, kl, est, ratio, m in sorted(rows, key=key)
    )


def _min(infos: Sequence[NormInfo], idx: Sequence[int]) -> float | None:
    vals = (infos[i].min_q_over_eps for i in idx)
    return min((v for v in vals if v is not None), default=None)


def _configured_eps(values: Sequence[float]) -> float:
    """The most common live eps of a group (the smallest of the most common)."""
    counts = collections.Counter(values)
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

    def reach(way: Iterable[tuple[float, Metrics]]) -> tuple[float, bool]:
        """The last eps of ``way`` (walked away from eps0) before the first failing point,
        and whether no point failed (the limit lies beyond the sweep)."""
        reached = eps0
        for value, m in way:
            if kl_fails(m, max_kl) or top1_fails(m, min_top1):
                return reached, False
            reached = value
        return reached, True

    largest, up = reach(p for p in points if p[0] > eps0)
    smallest, down = reach(p for p in reversed(points) if p[0] < eps0)
    return Suggestion(
        group=group,
        eps=eps0,
        largest=largest,
        smallest=smallest,
        points=tuple((v, m.kl, m.kl_first) for v, m in points),
        largest_beyond=up,
        smallest_beyond=down,
    )
