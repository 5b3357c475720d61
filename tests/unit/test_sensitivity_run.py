"""sensitivity/run.py: ``measure`` on a hand-built causal model (an embedding, two residual
blocks each with a torch.nn.RMSNorm, a final RMSNorm, a head; no attention, so each token's
logits depend on that token alone), checked against KL, min q/eps and perplexity computed here
by running the same model with its eps attributes set by hand; the refusals; and the pure
helpers (the sweep, the rows' order and shares, the suggestion's walk, the configured eps)."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.sensitivity.result import Change, Metrics  # noqa: E402
from rmsnorm_eps.sensitivity.run import (  # noqa: E402
    SWEEP_FACTORS,
    MeasureOptions,
    _configured_eps,
    _rows,
    _suggest,
    measure,
)

V, D = 11, 8
EPS = 1e-2  # large beside the embeddings' q, so an eps change moves the logits


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.RMSNorm(D, eps=EPS)
        self.mlp = torch.nn.Linear(D, D)

    def forward(self, x: Any) -> Any:
        return x + self.mlp(self.norm(x))


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(V, D)
        with torch.no_grad():
            self.embed.weight.mul_(0.05)  # q ~ 2.5e-3: below eps
        self.layers = torch.nn.ModuleList([_Block(), _Block()])
        self.norm = torch.nn.RMSNorm(D, eps=EPS)
        self.head = torch.nn.Linear(D, V)
        self.config = SimpleNamespace(vocab_size=V)

    def get_input_embeddings(self) -> Any:
        return self.embed

    def forward(self, input_ids: Any, attention_mask: Any = None, use_cache: bool = False) -> Any:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return SimpleNamespace(logits=self.head(self.norm(x)))


def _tokenizer(texts: list[str], **_: Any) -> dict[str, list[list[int]]]:
    return {"input_ids": [[1 + (ord(c) % (V - 1)) for c in t] for t in texts]}


TEXTS = ["hello world", "abc", "a longer line of text"]


def _loaded(model: Any = None, family: str = "causal", pad: int | None = 0) -> Any:
    return SimpleNamespace(
        family=family,
        model=_Tiny().eval() if model is None else model,
        tokenizer=_Tok(pad),
        name="tiny",
        source="hand-built",
    )


class _Tok:
    def __init__(self, pad: int | None) -> None:
        self.pad_token_id = pad

    def __call__(self, texts: list[str], **kw: Any) -> dict[str, list[list[int]]]:
        return _tokenizer(texts, **kw)


def _by_hand(model: Any, eps: dict[str, float]) -> list[Any]:
    """Each text's float64 log-softmax with the named norms' eps set by hand."""
    mods = dict(model.named_modules())
    old = {n: mods[n].eps for n in eps}
    try:
        for n, e in eps.items():
            mods[n].eps = e
        with torch.no_grad():
            out = []
            for row in _tokenizer(TEXTS)["input_ids"]:
                logits = model(torch.tensor([row])).logits[0]
                out.append(torch.log_softmax(logits.double(), dim=-1))
            return out
    finally:
        for n, e in old.items():
            mods[n].eps = e


def _kl(base: list[Any], new: list[Any]) -> tuple[float, float]:
    """Mean KL(base || new) at positions >= 1 and at position 0."""
    rest = [(b.exp() * (b - n)).sum(-1)[1:] for b, n in zip(base, new, strict=True)]
    first = [(b.exp() * (b - n)).sum(-1)[0] for b, n in zip(base, new, strict=True)]
    return float(torch.cat(rest).mean()), float(torch.stack(first).mean())


NAMES = ("layers.0.norm", "layers.1.norm", "norm")

#: unit roundoff of float32
U32 = 2.0**-24


def _logit_error(model: Any) -> float:
    """A bound on the float32 rounding error of any logit of the tiny model, whatever the
    kernels' summation order: gamma_m * max_{t,v} (|W| |h_t| + |b|)_v (Higham, Accuracy and
    Stability of Numerical Algorithms, 2nd ed., Lemma 3.1 and eq. 3.5), h the head's input
    taken at max(|h|, rms(h)) per element (the final RMSNorm's output is accurate relative to
    its RMS, not per element), gamma_m = m u / (1 - m u), m = 6 D + 14 the float32 operations
    on a logit's longest path (per block: D squares and sums, add eps, rsqrt, multiply, D + 1
    in the Linear, the residual add; the final norm the same D + 3; the head D + 1)."""
    m = 6 * D + 14
    gamma = m * U32 / (1 - m * U32)
    w, b = model.head.weight.detach().double().abs(), model.head.bias.detach().double().abs()
    worst = 0.0
    for row in _tokenizer(TEXTS)["input_ids"]:
        with torch.no_grad():
            emb = model.embed(torch.tensor([row]))
            x = emb
            for layer in model.layers:
                x = layer(x)
            h = model.norm(x)[0].double()
        rms = h.pow(2).mean(-1, keepdim=True).sqrt()
        worst = max(worst, float((torch.maximum(h.abs(), rms) @ w.T + b).max()))
    return gamma * worst


def _kl_tolerance(base: list[Any], new: list[Any], e: float) -> tuple[float, float]:
    """A first-order bound on |KL(measured) - KL(by hand)| (positions >= 1, position 0) when
    every logit of both float32 runs is off by at most ``e``: dKL/dz_v = p_v (lp_v - lq_v -
    KL) and dKL/dz'_v = p'_v - p_v, so one run's error moves a token's KL by at most e * S,
    S = sum_v |p'_v - p_v| + sum_v p_v |lp_v - lq_v - KL|; two runs, twice that."""
    rest, first = [], []
    for b, n in zip(base, new, strict=True):
        kl = (b.exp() * (b - n)).sum(-1, keepdim=True)
        s = (n.exp() - b.exp()).abs().sum(-1) + (b.exp() * (b - n - kl).abs()).sum(-1)
        rest.append(s[1:])
        first.append(s[0])
    return 2 * e * float(torch.cat(rest).mean()), 2 * e * float(torch.stack(first).mean())


def test_measure_equals_the_model_run_by_hand() -> None:
    loaded = _loaded()
    model = loaded.model
    change = Change("eps=0.1", None, "eps=0.1", True)
    res = measure(loaded, TEXTS, [change], per_norm=True, per_role=True, batch_size=2)
    # the norms, where each runs (decoder layers finished) and its role
    assert [(n.name, n.layer, n.role, n.eps) for n in res.norms] == [
        ("layers.0.norm", 0, "other", EPS),
        ("layers.1.norm", 1, "other", EPS),
        ("norm", 2, "final", EPS),
    ]
    # min q/eps of the first norm: its input is the embedding of each real token
    ids = sorted({i for row in _tokenizer(TEXTS)["input_ids"] for i in row})
    q = model.embed.weight.detach().double()[ids].pow(2).mean(-1)
    assert res.norms[0].min_q_over_eps == pytest.approx(float(q.min()) / EPS, rel=1e-5)
    base = _by_hand(model, {})
    every = _by_hand(model, dict.fromkeys(NAMES, 0.1))
    kl, kl_first = _kl(base, every)
    # measure batches the texts (other kernels, other summation orders) and runs the changed
    # model from reused layer outputs: equal to float32 rounding, bounded here
    e = _logit_error(model)
    tol, tol_first = _kl_tolerance(base, every, e)
    assert tol < 1e-3 * kl  # the bound is tight enough to catch a wrong KL
    (result,) = res.changes
    assert abs(result.all.kl - kl) <= tol and kl > 0
    assert abs(result.all.kl_first - kl_first) <= tol_first
    n = sum(len(t) for t in TEXTS)
    assert (result.all.tokens, result.all.tokens_first) == (n - 3, 3)
    assert res.tokens == n and res.texts == 3
    # one norm alone: the row of layers.1.norm is the model with only that eps changed
    rows = {r.name: r for r in result.per_norm}
    alone = _by_hand(model, {"layers.1.norm": 0.1})
    one, _ = _kl(base, alone)
    assert abs(rows["layers.1.norm"].kl - one) <= _kl_tolerance(base, alone, e)[0]
    assert not rows["layers.1.norm"].estimated
    assert sum(r.share for r in result.per_norm if r.share is not None) == pytest.approx(1.0)
    kls = [r.kl for r in result.per_norm]
    assert kls == sorted(kls, reverse=True)  # type: ignore[type-var]
    assert {r.name for r in result.per_role} == {"other", "final"}
    # the base perplexity: exp of the mean NLL of every next real token
    nll = [-b[t, row[t + 1]] for b, row in zip(base, _tokenizer(TEXTS)["input_ids"], strict=True)
           for t in range(len(row) - 1)]  # fmt: skip
    # d(-log p_y)/dz_v = p_v - [v = y]: a token's NLL moves by at most 2 e per run
    nll_base = float(torch.stack(nll).mean())
    assert abs(math.log(res.perplexity_base) - nll_base) <= 2 * 2 * e
    assert res.passes.layers == 2 and res.passes.batches == 2


def test_changing_to_the_same_eps_changes_nothing_bit_for_bit() -> None:
    res = measure(_loaded(), TEXTS, [Change("same", None, f"eps={EPS!r}", True)])
    m = res.changes[0].all
    assert m.kl == 0.0 and m.max_abs_logit_change == 0.0 and m.top1_agreement == 1.0


def test_refusals() -> None:
    with pytest.raises(CaptureError, match="needs a causal language model, not an encoder"):
        measure(_loaded(family="encoder"), TEXTS, [])
    with pytest.raises(CaptureError, match="no text to run"):
        measure(_loaded(), [], [])
    with pytest.raises(CaptureError, match="exact_top must be >= 1"):
        measure(_loaded(), TEXTS, [], exact_top=0)
    small = _Tiny()
    small.config.vocab_size = 5
    with pytest.raises(CaptureError, match=r"token id \d+ >= the model's vocab_size 5"):
        measure(_loaded(small), TEXTS, [])
    with pytest.raises(CaptureError, match="2 batch\\(es\\) cannot be shared by 3 ranks"):
        measure(_loaded(), TEXTS, [], batch_size=2, world=3)


def test_the_sweep_is_half_decades_without_the_configured_eps() -> None:
    assert len(SWEEP_FACTORS) == 12 and 1.0 not in SWEEP_FACTORS
    assert SWEEP_FACTORS[0] == pytest.approx(1e-3) and SWEEP_FACTORS[-1] == pytest.approx(1e3)
    steps = [b / a for a, b in itertools.pairwise(SWEEP_FACTORS)]
    assert steps[5] == pytest.approx(10.0)  # across the gap left by 1
    assert all(s == pytest.approx(math.sqrt(10.0)) for i, s in enumerate(steps) if i != 5)
    assert MeasureOptions().batch_size == 8 and MeasureOptions().world == 1


def _m(kl: float | None, top1: float | None = 1.0) -> Metrics:
    return Metrics(kl, kl, top1, top1, 0.0, 0.0, None, 10, 2)


def test_rows_exact_first_by_kl_then_estimates_with_shares() -> None:
    names = [("a", "input", 5.0), ("b", "input", None), ("c", "final", 1.0), ("d", "q/k", 2.0)]
    exact = {(0, "norm", "a"): _m(0.1), (0, "norm", "c"): _m(0.3), (0, "norm", "d"): _m(math.nan)}
    rows = _rows(0, "norm", names, exact, {"b": 0.6})
    assert [(r.name, r.estimated) for r in rows] == [
        ("c", False),
        ("a", False),
        ("d", False),  # a NaN KL sorts after every number
        ("b", True),
    ]
    total = 0.3 + 0.1 + 0.6  # the NaN is not in the total
    assert [r.share for r in rows[:2]] == [pytest.approx(0.3 / total), pytest.approx(0.1 / total)]
    assert rows[3].share == pytest.approx(0.6 / total) and rows[3].metrics is None
    assert rows[1].min_q_over_eps == 5.0 and rows[1].role == "input"
    # without estimates only the exact rows; with no KL total no share
    assert [r.name for r in _rows(0, "norm", names, exact, None)] == ["c", "a", "d"]
    zero = _rows(0, "norm", names[:1], {(0, "norm", "a"): _m(0.0)}, None)
    assert zero[0].share is None


def test_the_suggestion_walks_until_the_first_failing_point() -> None:
    eps0 = 1e-5
    kl = {f: 10 ** (abs(math.log10(f)) - 3) for f in SWEEP_FACTORS}  # grows away from eps0
    exact = {(-1, "model", repr(eps0 * f)): _m(kl[f]) for f in SWEEP_FACTORS}
    s = _suggest("model", eps0, exact, 0.01, None)
    # kl <= 0.01 while |log10 f| <= 1: from eps0 / 10 to eps0 * 10
    assert s.largest == pytest.approx(eps0 * 10) and s.smallest == pytest.approx(eps0 / 10)
    assert not s.largest_beyond and not s.smallest_beyond  # limits found
    assert [p[0] for p in s.points] == sorted(eps0 * f for f in SWEEP_FACTORS)
    # every point within: the edges of the sweep, marked as beyond it (not limits found)
    s = _suggest("model", eps0, exact, 10.0, None)
    assert s.largest == pytest.approx(eps0 * 1e3) and s.largest_beyond
    assert s.smallest == pytest.approx(eps0 * 1e-3) and s.smallest_beyond
    # a failing top-1 next to eps0 stops the walk there
    exact[(-1, "model", repr(eps0 * SWEEP_FACTORS[6]))] = _m(0.0, top1=0.5)
    s = _suggest("model", eps0, exact, 0.01, 0.9)
    assert s.largest == eps0 and s.smallest == pytest.approx(eps0 / 10)


def test_the_configured_eps_is_the_most_common_then_the_smallest() -> None:
    assert _configured_eps([1e-5, 1e-6, 1e-5]) == 1e-5
    assert _configured_eps([1e-5, 1e-6]) == 1e-6
    assert _configured_eps([3e-4]) == 3e-4


def test_the_timed_cost_counts_layers_head_metric_and_screen() -> None:
    """Two batches, 4 layers; full forwards timed per batch, the fastest 1.2 s and 0.8 s (a
    forward pass of the texts is 2 s); 12 head calls timed 1.2 s (0.2 s a pass: a share of
    0.1); 20 layer evaluations (2.5 passes) and 6 head runs; metric 3 s, screening 1 s; the
    whole run 10 s."""
    from rmsnorm_eps.sensitivity.plan import Counter
    from rmsnorm_eps.sensitivity.run import _timing

    count = Counter(forward=26, heads=6, head_calls=12, base_passes=4)
    count.seconds.update(base=4.0, head=1.2, metric=3.0, screen=1.0)
    for batch, seconds in ((0, 1.5), (0, 1.2), (1, 0.8), (1, 0.9), (0, 1.3)):
        count.full_pass(batch, seconds)  # the fastest of each batch: 1.2 + 0.8
    plan = SimpleNamespace(count=count, batches=[None, None], layers=[None] * 4)
    t = _timing(plan, 10.0)  # type: ignore[arg-type]
    assert t is not None and t.pass_seconds == 2.0
    assert t.layers == pytest.approx(2.5 * 0.9) and t.head == pytest.approx(3 * 0.1)
    assert (t.metric, t.screen) == (1.5, 0.5) and t.measured == 5.0
    assert t.total == pytest.approx(2.25 + 0.3 + 1.5 + 0.5)
    count.fastest.clear()
    assert _timing(plan, 10.0) is None  # type: ignore[arg-type]
