"""The screening estimate of every norm's KL from one forward and a few backward passes.

For a small change the KL of a token's next-token distribution is second order in the change
of its logits dz: KL(p || p') ~ 0.5 dz^T F dz, with F = diag(p) - p p^T the Fisher matrix of
the softmax. Changing norm k alone changes its output by dy_k (computed exactly, on the base
pass's input of the norm, by running the module under the new setting) and the logits by
dz ~ J_k dy_k to first order.

F is the covariance of s = e_y - p with y drawn from p, so for one draw s_t per token
(independent across tokens, mean zero) and g_k = d(sum_t s_t . z_t)/d y_k (one backward pass
gives g_k for every norm at once)::

    E[(g_k . dy_k)^2] = sum_t dz_t^T F_t dz_t ~ 2 * sum_t KL_t

and the texts of a batch are independent, so the product is taken per text and the squares
summed. The estimate of norm k's summed KL over the tokens at positions >= 1 is half the mean
of X_d = sum_b (g_k[b] . dy_k[b])^2 over ``samples`` draws d (the draws are made only at
positions >= 1, so the estimate is of ``kl``); its standard error is half the sample standard
deviation of X_d over sqrt(samples) (the draws are independent: the variance of the mean is
Var(X) / samples). Every draw of a batch comes from one ``torch.multinomial`` call (one
cumulative sum over the vocabulary per token, ``samples`` searches), and sum_t s_t . z_t is
z_t at the draw minus the p-weighted mean of z_t, made once. Cost: one forward with gradients
and ``samples`` backward passes, whatever the number of norms; it only ranks the norms, whose
top K are then measured exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from rmsnorm_eps.sensitivity.plan import Plan, logits_of, timed
from rmsnorm_eps.sensitivity.result import Change

__all__ = ["Estimates", "screen"]


@dataclass(frozen=True)
class Estimates:
    """The screening's output: ``sums[change][norm]`` the estimated summed KL over the tokens
    at positions >= 1 (all ranks), ``errors[change][norm]`` its standard error (the spread of
    the ``samples`` draws: std / sqrt(samples)), ``tokens`` those tokens."""

    sums: list[list[float]]
    errors: list[list[float]]
    tokens: int


def screen(plan: Plan, changes: Sequence[Change], samples: int, seed: int) -> Estimates:
    """Estimated summed KL (positions >= 1) per change and norm with its standard error,
    all-reduced across ranks (see the module docstring)."""
    import torch
    import torch.distributed as dist

    shape = (len(changes), len(plan.norms), samples)
    per_draw = torch.zeros(shape, dtype=torch.float64, device=plan.device)
    tokens = torch.zeros((), dtype=torch.float64, device=plan.device)
    gen = torch.Generator(device=plan.device)
    groups: dict[str | None, list[int]] = {}
    for ci, c in enumerate(changes):
        groups.setdefault(None if c.attribute else c.base, []).append(ci)
    for b, (ids, mask) in enumerate(plan.batches):
        for base, members in groups.items():
            gen.manual_seed(seed * 1_000_003 + plan.first_batch + b)
            logits, outputs, deltas = _graph_forward(plan, changes, members, base, ids, mask)
            other = mask.to(plan.device).bool().clone()
            other[:, 0] = False
            tokens += other.sum()
            with timed(plan, "screen"):  # the draws, backward passes and products
                vocab = logits.shape[-1]
                p = torch.softmax(logits.detach().double(), dim=-1)
                # every draw of the batch from one multinomial call (a cumulative sum over the
                # vocabulary per token, then ``samples`` searches), not one call per draw
                picks = torch.multinomial(p.reshape(-1, vocab), samples, True, generator=gen)
                picks = picks.reshape(*logits.shape[:-1], samples)
                # sum_t s_t . z_t with s_t = e_y - p: z at the draw minus the p-weighted mean
                mean = (p.to(logits.dtype) * logits).sum(dim=-1)
                flat = [
                    (k, call, y)
                    for k, ys in enumerate(outputs)
                    for call, y in enumerate(ys)
                    if y.requires_grad
                ]
                for draw in range(samples):
                    picked = logits.gather(-1, picks[..., draw : draw + 1]).squeeze(-1)
                    loss = torch.where(other, picked - mean, 0.0).sum()
                    grads = torch.autograd.grad(
                        loss,
                        [y for _, _, y in flat],
                        retain_graph=draw < samples - 1,
                        allow_unused=True,
                    )
                    plan.count.backward += len(plan.layers) + 1
                    plan.tick()
                    for j, ci in enumerate(members):
                        batch = int(ids.shape[0])
                        per_draw[ci, :, draw] += _squares(flat, grads, deltas[j], batch, plan)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(per_draw, op=dist.ReduceOp.SUM)
        dist.all_reduce(tokens, op=dist.ReduceOp.SUM)
    sums = per_draw.mean(dim=-1)
    spread = per_draw.std(dim=-1) if samples > 1 else torch.full_like(sums, math.inf)
    errors = spread / math.sqrt(samples)
    return Estimates(sums.cpu().tolist(), errors.cpu().tolist(), int(tokens.item()))


def _squares(
    flat: list[Any], grads: Sequence[Any], deltas: list[list[Any]], batch: int, plan: Plan
) -> Any:
    """0.5 * sum_b (g_k[b] . dy_k[b])^2 per norm k (a norm whose input has its tokens
    flattened gives one product for the batch)."""
    import torch

    per = [torch.zeros(batch, dtype=torch.float64, device=plan.device) for _ in plan.norms]
    for (k, call, _), g in zip(flat, grads, strict=True):
        if g is None:
            continue
        d = deltas[k][call]
        prod = (g.double() * d.double()).reshape(g.shape[0], -1).sum(dim=1)
        if g.shape[0] == batch:
            per[k] += prod
        else:
            per[k][0] += prod.sum()
    return 0.5 * torch.stack([(ck**2).sum() for ck in per])


def _graph_forward(
    plan: Plan,
    changes: Sequence[Change],
    members: list[int],
    base: str | None,
    ids: Any,
    mask: Any,
) -> tuple[Any, list[list[Any]], list[list[list[Any]]]]:
    """A forward with gradients from the embeddings' output on: the logits, every norm's
    outputs (per call) and, per change of ``members``, their exact changes."""
    import torch

    from rmsnorm_eps.sensitivity.swap import applied

    norms = plan.norms
    outputs: list[list[Any]] = [[] for _ in norms]
    deltas: list[list[list[Any]]] = [[[] for _ in norms] for _ in members]

    def leaf(module: Any, args: Any, out: Any) -> Any:
        return out.detach().requires_grad_(True)

    everyone = [(n.module, n.record) for n in norms]
    with torch.enable_grad(), ExitStack() as stack:
        stack.enter_context(plan.model.get_input_embeddings().register_forward_hook(leaf))
        for k, n in enumerate(norms):
            hook = _delta_hook(k, n, outputs, deltas, members, changes)
            stack.enter_context(n.module.register_forward_hook(hook, with_kwargs=True))
        if base is not None:
            stack.enter_context(applied(changes[members[0]], "base", everyone))
        logits = logits_of(plan, ids, mask)
    return logits, outputs, deltas


def _delta_hook(
    k: int,
    n: Any,
    outputs: list[list[Any]],
    deltas: list[list[list[Any]]],
    members: list[int],
    changes: Sequence[Change],
) -> Any:
    """A forward hook keeping norm k's output (in the graph) and, per change, the exact change
    of that output under the new setting on the same input (no gradients)."""
    import torch

    from rmsnorm_eps.sensitivity.swap import applied

    def hook(module: Any, args: Any, kwargs: Any, out: Any) -> None:
        y = out[0] if isinstance(out, tuple | list) else out
        outputs[k].append(y)
        with torch.no_grad():
            for j, ci in enumerate(members):
                with applied(changes[ci], "to", [(n.module, n.record)]):
                    new = module.forward(*args, **kwargs)
                new = new[0] if isinstance(new, tuple | list) else new
                deltas[j][k].append((new - y).detach())

    return hook
