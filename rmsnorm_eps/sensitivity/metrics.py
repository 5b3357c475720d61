"""Output metrics of a change, accumulated on the logits' device; only the sums cross to the
host (once, in :meth:`Accumulator.metrics`), after an all_reduce across the ranks of a
torch.distributed job when one is initialized.

Per batch, with z the base logits and z' the changed ones ([B, T, V]), mask [B, T] the real
tokens (right padding: position = index):

* KL per token = sum_v p_v (log p_v - log p'_v), summed per position class (0 and >= 1);
  padded positions are selected out, so whatever logits a model computes there (NaN
  included) never reach a sum;
* top-1: argmax z == argmax z' counted per class (z' at the base's argmax equal to max z':
  a tie for the maximum agrees);
* max |z' - z| over real tokens;
* at each text's last real token: sum ||z' - z||^2 and sum ||z||^2 (NMSE = their ratio);
* negative log-likelihood of each next real token (ids[t + 1] where mask[t + 1]) under z'.

How (:class:`Base`, prepared once per batch, then :meth:`Accumulator.add_prepared` per
variant): with d = z - z' (float64: exact for float32 logits), p = exp(z - lse(z)) in float64
(made once per batch),
P = sum_v p_v and S = sum_v p_v exp(-d_v) = exp(lse(z') - lse(z)) (exactly, in real
arithmetic):

    KL = sum_v p_v d_v / P + log(S / P)        lse(z') = lse(z) + log S

Both sums are float64, walked over the vocabulary in chunks of ``chunk`` columns (no
full-vocabulary temporary per variant; S with a running shift, so no exp overflows). The
form is invariant to a common rescaling of p and its derivative in each p_v is O(d^2), so the
float64 rounding of p (relative 2^-53 per entry) moves KL by about 2^-53 * KL: the sums equal a
float64 log_softmax's (``tests/unit/test_sensitivity_metrics.py``: within 1e-12 relative, and
1e-14 absolute against the same float64 formula on random Gemma-sized logits). A batch where
some base probability is 0 in float64 (a logit -inf, or log p < -745) takes lse(z') from z'
itself: S leaves those entries out.
"""

from __future__ import annotations

import math
from typing import Any

from rmsnorm_eps.sensitivity.result import Metrics

__all__ = ["Accumulator", "Base", "nll_sums"]

# slots of the float64 sum vector
_KL0, _KL1, _N0, _N1, _TOP0, _TOP1, _NUM, _DEN, _NLL, _NNLL = range(10)

#: float64 elements per chunk of the vocabulary walk (tokens x columns): 512 KiB, so a chunk
#: and its temporaries stay in a 2 MiB L2 cache
CHUNK_ELEMENTS = 1 << 16


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


class Base:
    """One batch's base logits, prepared once for every variant compared with them: the real
    tokens' logits [N, V] and p = softmax (float64: 16 bytes per logit), P, lse(z), argmax,
    the position class of each token, its next real token and each text's last real token."""

    def __init__(self, logits: Any, ids: Any, mask: Any, chunk: int | None = None) -> None:
        import torch

        dev = logits.device
        m = mask.to(dev).bool()
        self.shape = tuple(logits.shape)
        self.mask = m
        self.dense = bool(m.all())  # no padding: the logits' rows are the tokens
        z = logits.reshape(-1, logits.shape[-1]) if self.dense else logits[m]
        self.z = z.double()
        # max + log(sum(exp)): torch.logsumexp is many times slower on CPU
        zmax = self.z.amax(dim=-1, keepdim=True)
        self.lse = (zmax + (self.z - zmax).exp_().sum(dim=-1, keepdim=True).log_()).squeeze(-1)
        self.p = torch.exp(self.z - self.lse.unsqueeze(-1))
        self.psum = self.p.sum(dim=-1)
        # a vocabulary entry of probability 0 (a logit -inf, or one that underflows) takes
        # the slower exact path of :meth:`compare`
        self.exact = bool((self.p == 0).any())
        self.top = self.z.argmax(dim=-1)
        pos = torch.arange(m.shape[1], device=dev).expand_as(m)
        self.first = pos[m] == 0
        n = int(self.z.shape[0])
        self.chunk = chunk or max(1, CHUNK_ELEMENTS // max(n, 1))
        # next real token of each real token (NLL), as rows of z
        nxt = torch.zeros_like(m)
        nxt[:, :-1] = m[:, 1:]
        self.has_next = nxt[m]
        target = torch.zeros_like(ids.to(dev))
        target[:, :-1] = ids.to(dev)[:, 1:]
        self.target = target[m]
        # each text's last real token, as rows of z
        real = m.any(dim=1)
        counts = m.sum(dim=1)
        ends = torch.cumsum(counts, 0) - 1
        self.last = ends[real]
        self.den = (self.z[self.last] ** 2).sum()
        self.flat = torch.nonzero(m.reshape(-1)).squeeze(-1)  # [B*T] index of each real token

    def rows(self, new: Any, c0: int, c1: int) -> Any:
        """Columns c0:c1 of the changed logits at the real tokens, [N, c1 - c0]."""
        if self.dense:
            return new.reshape(-1, new.shape[-1])[:, c0:c1]
        return new[..., c0:c1][self.mask]

    def compare(self, new: Any) -> dict[str, Any]:
        """Per real token: KL, top-1 agreement, max |d|, NLL of the next token under z'
        (see the module docstring), and sum ||z' - z||^2 at the last tokens."""
        import torch

        n, v = self.z.shape
        dev = self.z.device

        def zeros(fill: float = 0.0) -> Any:
            return torch.full((n,), fill, dtype=torch.float64, device=dev)

        m1, s, shift, maxabs, best = zeros(), zeros(), zeros(-math.inf), zeros(), zeros(-math.inf)
        num = torch.zeros((), dtype=torch.float64, device=dev)
        for c0 in range(0, v, self.chunk):
            c1 = min(v, c0 + self.chunk)
            zn = self.rows(new, c0, c1)
            d = self.z[:, c0:c1] - zn  # float64 - float32: exact
            # amax and amin, not aminmax: two vectorized passes beat its one on CPU
            lo, hi = d.amin(dim=-1), d.amax(dim=-1)
            maxabs = torch.maximum(maxabs, torch.maximum(hi, -lo))
            cmax = zn.amax(dim=-1).double()
            best = torch.maximum(best, cmax)
            num += (d[self.last] ** 2).sum()
            p = self.p[:, c0:c1]
            if self.exact:
                # a probability 0 of the base: 0 log 0 = 0 (p * d would be 0 * -inf), and
                # lse(z') from z' itself (S leaves that entry out)
                m1 += torch.where(p > 0, p * d, 0.0).sum(dim=-1)
                top = torch.maximum(shift, cmax.double())
                s = s * torch.exp(shift - top).nan_to_num(0.0)
                s += torch.exp(zn.double() - top.unsqueeze(-1)).sum(dim=-1)
            else:
                m1 += torch.linalg.vecdot(p, d)
                # S = sum p exp(-d), kept as exp(shift) * s
                top = torch.maximum(shift, -lo)
                s = s * torch.exp(shift - top).nan_to_num(0.0)
                s += torch.linalg.vecdot(p, d.neg_().sub_(top.unsqueeze(-1)).exp_())
            shift = top
        log_s = shift + torch.log(s)
        if self.exact:
            log_s = log_s - self.lse
        kl = m1 / self.psum + log_s - torch.log(self.psum)
        flat = new.reshape(-1, v)
        nll = self.lse + log_s - flat[self.flat, self.target].double()
        # top-1 agreement: z' reaches its maximum at the base's argmax (a tie for the maximum
        # counts as agreeing)
        agree = flat[self.flat, self.top].double() >= best
        return {"kl": kl, "agree": agree, "maxabs": maxabs, "nll": nll, "num": num}


class Accumulator:
    """Sums of one change's metrics over batches (see the module docstring)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.sums = torch.zeros(10, dtype=torch.float64, device=device)
        self.maxabs = torch.zeros((), dtype=torch.float64, device=device)

    def add(self, base: Any, new: Any, ids: Any, mask: Any) -> None:
        """One batch: ``base``/``new`` logits [B, T, V], ``mask`` [B, T] (1 real, 0 pad)."""
        self.add_prepared(Base(base, ids, mask), new)

    def add_prepared(self, base: Base, new: Any) -> None:
        """One batch: ``base`` prepared from the base logits (once for every variant),
        ``new`` the changed logits [B, T, V] of the same batch."""
        import torch

        r = base.compare(new)
        s = self.sums
        for i, cls in enumerate((base.first, ~base.first)):
            # selected, never multiplied by 0: a NaN must not cross classes
            s[_KL0 + i] += torch.where(cls, r["kl"], 0.0).sum()
            s[_N0 + i] += cls.sum()
            s[_TOP0 + i] += (r["agree"] & cls).sum()
        if r["maxabs"].numel():
            self.maxabs = torch.maximum(self.maxabs, r["maxabs"].amax().double())
        s[_NUM] += r["num"]
        s[_DEN] += base.den
        s[_NLL] += torch.where(base.has_next, r["nll"], 0.0).sum()
        s[_NNLL] += base.has_next.sum()

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
