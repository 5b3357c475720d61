"""sensitivity/metrics.py: the per-change output metrics, against the formulas of the module
docstring written out here in plain Python (math.exp/log over tiny hand-made logits): KL per
position class, top-1 agreement, max |dz| over real tokens, NMSE at each text's last real
token, and the perplexity of each next real token; padding never counts."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.sensitivity.metrics import Accumulator, Base, nll_sums  # noqa: E402


def _log_softmax(z: list[float]) -> list[float]:
    m = max(z)
    s = math.log(math.fsum(math.exp(v - m) for v in z))
    return [v - m - s for v in z]


def _kl(z: list[float], zp: list[float]) -> float:
    lp, lq = _log_softmax(z), _log_softmax(zp)
    return math.fsum(math.exp(a) * (a - b) for a, b in zip(lp, lq, strict=True))


def _argmax(z: list[float]) -> int:
    return max(range(len(z)), key=lambda i: z[i])


BASE = torch.tensor(
    [
        [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0], [2.0, 2.5, 1.0]],
        [[0.3, 0.2, 0.1], [1.5, 0.5, -0.5], [9.0, 9.0, 9.0]],  # last token is padding
    ],
    dtype=torch.float32,
)
NEW = BASE + torch.tensor(
    [
        [[0.1, -0.2, 0.0], [0.0, 0.0, 0.0], [0.9, 0.0, 0.0]],  # top-1 flips at (0, 2)
        [[0.0, 0.5, 0.0], [0.0, 0.3, 0.1], [50.0, -50.0, 0.0]],  # padding change ignored
    ]
)
IDS = torch.tensor([[0, 2, 1], [1, 0, 2]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def _real() -> list[tuple[int, int]]:
    return [(b, t) for b in range(2) for t in range(3) if MASK[b, t]]


def test_metrics_match_the_formulas() -> None:
    acc = Accumulator(torch.device("cpu"))
    acc.add(BASE, NEW, IDS, MASK)
    m = acc.metrics()
    z, zn = BASE.double().tolist(), NEW.double().tolist()
    first = [(b, t) for b, t in _real() if t == 0]
    rest = [(b, t) for b, t in _real() if t > 0]
    assert (m.tokens_first, m.tokens) == (2, 3)
    assert m.kl_first == pytest.approx(
        math.fsum(_kl(z[b][t], zn[b][t]) for b, t in first) / 2, rel=1e-12
    )
    assert m.kl == pytest.approx(math.fsum(_kl(z[b][t], zn[b][t]) for b, t in rest) / 3, rel=1e-12)
    agree = [_argmax(z[b][t]) == _argmax(zn[b][t]) for b, t in rest]
    assert m.top1_agreement == pytest.approx(sum(agree) / 3) and sum(agree) == 2
    agree0 = [_argmax(z[b][t]) == _argmax(zn[b][t]) for b, t in first]
    assert m.top1_agreement_first == sum(agree0) / 2 == 0.5  # (1, 0) flips to index 1
    assert m.max_abs_logit_change == pytest.approx(0.9, rel=1e-6)  # not the padding's 50
    last = {0: 2, 1: 1}
    num = math.fsum((zn[b][t][v] - z[b][t][v]) ** 2 for b, t in last.items() for v in range(3))
    den = math.fsum(z[b][t][v] ** 2 for b, t in last.items() for v in range(3))
    assert m.nmse_last == pytest.approx(num / den, rel=1e-12)
    # next real tokens: (0,0)->ids[0,1], (0,1)->ids[0,2], (1,0)->ids[1,1]; (1,1)->pad: none
    nll = [-_log_softmax(zn[0][0])[2], -_log_softmax(zn[0][1])[1], -_log_softmax(zn[1][0])[0]]
    assert m.perplexity == pytest.approx(math.exp(math.fsum(nll) / 3), rel=1e-12)


def test_batches_accumulate_like_one() -> None:
    one = Accumulator(torch.device("cpu"))
    one.add(BASE, NEW, IDS, MASK)
    two = Accumulator(torch.device("cpu"))
    two.add(BASE[:1], NEW[:1], IDS[:1], MASK[:1])
    two.add_prepared(Base(BASE[1:], IDS[1:], MASK[1:]), NEW[1:])
    a, b = one.metrics(), two.metrics()
    for field in (
        "kl",
        "kl_first",
        "top1_agreement",
        "nmse_last",
        "perplexity",
        "max_abs_logit_change",
    ):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-12), field
    assert (a.tokens, a.tokens_first) == (b.tokens, b.tokens_first)


def test_identical_logits_and_empty_classes() -> None:
    acc = Accumulator(torch.device("cpu"))
    one = BASE[:1, :1]  # one token per text: no position >= 1, no next token
    acc.add(one, one.clone(), IDS[:1, :1], MASK[:1, :1])
    m = acc.metrics()
    assert m.kl is None and m.top1_agreement is None and m.perplexity is None and m.tokens == 0
    assert m.kl_first == 0.0 and m.top1_agreement_first == 1.0
    assert m.max_abs_logit_change == 0.0 and m.nmse_last == 0.0
    zero = torch.zeros(1, 2, 3)
    acc = Accumulator(torch.device("cpu"))
    acc.add(zero, zero, IDS[:1, :2], MASK[:1, :2])
    assert math.isnan(acc.metrics().nmse_last)  # 0/0: no base logit energy


def test_nll_sums() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]]]))
    ids = torch.tensor([[0, 1, 2]])
    nll, n = nll_sums(logits, ids, torch.tensor([[1, 1, 1]]))
    assert float(n) == 2 and float(nll) == pytest.approx(-math.log(0.25) - math.log(0.8), rel=1e-6)
    nll, n = nll_sums(logits, ids, torch.tensor([[1, 1, 0]]))
    assert float(n) == 1 and float(nll) == pytest.approx(-math.log(0.25), rel=1e-6)
    nll, n = nll_sums(logits[:, :1], ids[:, :1], torch.tensor([[1]]))
    assert float(nll) == 0.0 and float(n) == 0.0 and nll.dtype == torch.float64


def test_nonfinite_logits_at_padding_and_empty_texts_change_nothing() -> None:
    """What a model computes at padded positions is arbitrary (NaN, inf): it is selected out,
    never multiplied by 0 (NaN * 0 = NaN spoilt every metric); a text of padding only has no
    last token for the NMSE."""
    clean = Accumulator(torch.device("cpu"))
    clean.add(BASE, NEW, IDS, MASK)
    base, new = BASE.clone(), NEW.clone()
    base[1, 2, 0] = float("nan")
    new[1, 2, 1] = float("inf")
    new[1, 2, 2] = -float("inf")
    pad = torch.full((1, 3, 3), float("nan"))
    dirty = Accumulator(torch.device("cpu"))
    dirty.add(
        torch.cat([base, pad]),
        torch.cat([new, pad]),
        torch.cat([IDS, IDS[:1]]),
        torch.cat([MASK, torch.zeros(1, 3, dtype=MASK.dtype)]),
    )
    a, b = clean.metrics(), dirty.metrics()
    assert a == b and math.isfinite(b.kl or math.nan) and math.isfinite(b.nmse_last)


def test_a_token_the_base_never_predicts_adds_nothing_to_kl() -> None:
    """p = 0 (base logit -inf) contributes 0 log 0 = 0, not NaN; q = 0 where p > 0 is inf."""
    base = torch.tensor([[[0.0, 1.0, -float("inf")], [0.0, 1.0, 2.0]]])
    new = torch.tensor([[[0.5, 1.0, 3.0], [0.0, -float("inf"), 2.0]]])
    acc = Accumulator(torch.device("cpu"))
    acc.add(base, new, torch.tensor([[0, 1]]), torch.tensor([[1, 1]]))
    m = acc.metrics()
    lp = _log_softmax([0.0, 1.0])
    lq = _log_softmax([0.5, 1.0, 3.0])
    want = math.fsum(math.exp(a) * (a - b) for a, b in zip(lp, lq[:2], strict=True))
    assert m.kl_first == pytest.approx(want, rel=1e-12)
    assert m.kl == math.inf


def test_the_chunked_walk_equals_a_float64_log_softmax_on_many_chunks() -> None:
    """Base prepared once, the variant walked in chunks of 7 columns (a vocabulary of 1000
    in 143 chunks, the last one short), small and large changes: KL, top-1 and max |dz|
    equal the plain float64 formula (the stated tolerance: 1e-12 relative, 1e-15 absolute:
    both are float64 evaluations of the same float32 logits), checked in plain Python."""
    gen = torch.Generator().manual_seed(3)
    base = 4 * torch.randn(2, 4, 1000, generator=gen)
    for scale in (1e-4, 1e-1, 3.0):
        new = base + scale * torch.randn(2, 4, 1000, generator=gen)
        ids = torch.randint(0, 1000, (2, 4), generator=gen)
        mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
        prepared = Base(base, ids, mask, chunk=7)
        got = prepared.compare(new)
        z, zn = base.double().tolist(), new.double().tolist()
        real = [(b, t) for b in range(2) for t in range(4) if mask[b, t]]
        want = [_kl(z[b][t], zn[b][t]) for b, t in real]
        for g, w in zip(got["kl"].tolist(), want, strict=True):
            assert g == pytest.approx(w, rel=1e-12, abs=1e-15), scale
        agree = [_argmax(z[b][t]) == _argmax(zn[b][t]) for b, t in real]
        assert got["agree"].tolist() == agree
        diff = [max(abs(a - c) for a, c in zip(z[b][t], zn[b][t], strict=True)) for b, t in real]
        assert got["maxabs"].tolist() == pytest.approx(diff, rel=1e-15)
        assert scale < 1 or not all(agree)  # the large change flips some top-1
