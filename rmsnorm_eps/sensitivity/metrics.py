"""Output metrics of a change, accumulated on the logits' device; only the sums cross to the
host (once, in :meth:`Accumulator.metrics`), after an all_reduce across the ranks of a
torch.distributed job when one is initialized.

Per batch, with z the base logits and z' the changed ones ([B, T, V]), mask [B, T] the real
tokens (right padding: position = index), lp = log_softmax(z) in float64:

* KL per token = sum_v exp(lp_v) (lp_v - lp'_v) (0 log 0 = 0), summed per position class (0
  and >= 1); padded positions are selected out, so whatever logits a model computes there
  (NaN included) never reach a sum;
* top-1: argmax z == argmax z' counted per class;
* max |z' - z| over real tokens;
* at each text's last real token: sum ||z' - z||^2 and sum ||z||^2 (NMSE = their ratio);
* negative log-likelihood of each next real token (ids[t + 1] where mask[t + 1]) under z'.
"""

from __future__ import annotations

import math
from typing import Any

from rmsnorm_eps.sensitivity.result import Metrics

__all__ = ["Accumulator", "nll_sums"]

# slots of the float64 sum vector
_KL0, _KL1, _N0, _N1, _TOP0, _TOP1, _NUM, _DEN, _NLL, _NNLL = range(10)


def nll_sums(logits: Any, ids: Any, mask: Any) -> tuple[Any, Any]:
    """(sum of -log p(ids[t+1]), count) over the real next tokens, as float64 device scalars."""
    import torch

    if logits.shape[1] < 2:
        zero = torch.zeros((), dtype=torch.float64, device=logits.device)
        return zero, zero
    lp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    target = ids[:, 1:].to(logits.device)
    keep = mask[:, 1:].to(logits.device).bool()
    picked = lp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return -torch.where(keep, picked, 0.0).sum(), keep.sum().double()


class Accumulator:
    """Sums of one change's metrics over batches (see the module docstring)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.sums = torch.zeros(10, dtype=torch.float64, device=device)
        self.maxabs = torch.zeros((), dtype=torch.float64, device=device)

    def add(self, base: Any, new: Any, ids: Any, mask: Any, base_lp: Any = None) -> None:
        """One batch: ``base``/``new`` logits [B, T, V], ``mask`` [B, T] (1 real, 0 pad);
        ``base_lp`` the base's float64 log_softmax when already made."""
        import torch

        dev = new.device
        m = mask.to(dev).bool()
        lp = torch.log_softmax(base.double(), dim=-1) if base_lp is None else base_lp
        lq = torch.log_softmax(new.double(), dim=-1)
        # p log(p/q) with 0 log 0 = 0: a token the base gives probability 0 (logit -inf) adds
        # nothing (p * (lp - lq) would be 0 * -inf = NaN there)
        kl = torch.where(lp > -math.inf, lp.exp() * (lp - lq), 0.0).sum(dim=-1)
        first = torch.zeros_like(m)
        first[:, 0] = True
        classes = (m & first, m & ~first)
        agree = base.argmax(dim=-1) == new.argmax(dim=-1)
        s = self.sums
        # padding is selected out, never multiplied by 0: a NaN or inf logit at a padded
        # position (what a model computes there is arbitrary) must not reach the sums
        for i, cls in enumerate(classes):
            s[_KL0 + i] += torch.where(cls, kl, 0.0).sum()
            s[_N0 + i] += cls.sum()
            s[_TOP0 + i] += (agree & cls).sum()
        diff = (new.double() - base.double()).abs().amax(dim=-1)
        self.maxabs = torch.maximum(self.maxabs, torch.where(m, diff, 0.0).amax())
        real = m.any(dim=1)  # a text with no real token has no last token
        last = (m.sum(dim=1) - 1).clamp(min=0)[real]
        rows = torch.arange(base.shape[0], device=dev)[real]
        zb = base[rows, last].double()
        zn = new[rows, last].double()
        s[_NUM] += ((zn - zb) ** 2).sum()
        s[_DEN] += (zb**2).sum()
        nll, n = nll_sums(new, ids, mask)
        s[_NLL] += nll
        s[_NNLL] += n

    def metrics(self) -> Metrics:
        """The metrics over every batch (and every rank), on the host."""

        import torch.distributed as dist

        sums, maxabs = self.sums, self.maxabs
        if dist.is_available() and dist.is_initialized():
            sums, maxabs = sums.clone(), maxabs.clone()
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
            dist.all_reduce(maxabs, op=dist.ReduceOp.MAX)
        v = sums.tolist()
        n0, n1 = int(v[_N0]), int(v[_N1])

        def ratio(a: float, n: int) -> float | None:
            return a / n if n else None

        return Metrics(
            kl=ratio(v[_KL1], n1),
            kl_first=ratio(v[_KL0], n0),
            top1_agreement=ratio(v[_TOP1], n1),
            top1_agreement_first=ratio(v[_TOP0], n0),
            max_abs_logit_change=float(maxabs.item()),
            nmse_last=v[_NUM] / v[_DEN] if v[_DEN] > 0 else math.nan,
            perplexity=math.exp(v[_NLL] / v[_NNLL]) if v[_NNLL] else None,
            tokens=n1,
            tokens_first=n0,
        )
