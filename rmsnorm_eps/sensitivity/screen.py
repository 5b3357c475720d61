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
of sum_b (g_k[b] . dy_k[b])^2 over ``samples`` draws (the draws are made only at positions
>= 1, so the estimate is of ``kl``). Cost: one forward with gradients and ``samples`` backward
passes, whatever the number of norms; it only ranks the norms, whose top K are then measured
exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from rmsnorm_eps.sensitivity.plan import Plan, logits_of
from rmsnorm_eps.sensitivity.result import Change

__all__ = ["screen"]


def screen(plan: Plan, changes: Sequence[Change], samples: int, seed: int) -> tuple[Any, int]:
    """Estimated summed KL (positions >= 1) per change and norm (``est[change][norm]``, host
    floats, all-reduced across ranks) and the number of tokens at positions >= 1."""
    import torch
    import torch.distributed as dist

    est = torch.zeros((len(changes), len(plan.norms)), dtype=torch.float64, device=plan.device)
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
            p = torch.softmax(logits.detach().double(), dim=-1)
            flat = [
                (k, call, y)
                for k, ys in enumerate(outputs)
                for call, y in enumerate(ys)
                if y.requires_grad
            ]
            for draw in range(samples):
                pick = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=gen)
                s = -p.clone()
                s.reshape(-1, p.shape[-1]).scatter_add_(
                    1, pick, torch.ones_like(pick, dtype=s.dtype)
                )
                s = s * other.unsqueeze(-1)
                loss = (s.to(logits.dtype) * logits).sum()
                grads = torch.autograd.grad(
                    loss,
                    [y for _, _, y in flat],
                    retain_graph=draw < samples - 1,
                    allow_unused=True,
                )
                plan.count.backward += len(plan.layers) + 1
                for j, ci in enumerate(members):
                    est[ci] += _squares(flat, grads, deltas[j], int(ids.shape[0]), plan) / samples
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(est, op=dist.ReduceOp.SUM)
        dist.all_reduce(tokens, op=dist.ReduceOp.SUM)
    return est.cpu().tolist(), int(tokens.item())


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
