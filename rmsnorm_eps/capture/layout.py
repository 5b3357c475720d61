"""Where the token and head axes of a norm's input are: the per-vector q arranged [B, T, H].

A token norm sees ``[B, T, D]`` or ``[B*T, D]``; a per-head norm ``[B, T, H, D]``, the
transposed view ``[B, H, T, D]``, ``[B*T, H, D]`` or ``[B*T*H, D]``. The axis whose size is the
call's sequence length T is the token axis. When T == H, the module's layout from an earlier
call decides; else the strides do: the token axis of a tensor made by a projection has stride
H*D, whether it is seen as ``[B, T, H, D]`` or as ``[B, H, T, D]``. When nothing decides, the
capture stops with a message naming the module (never a guess).
"""

from __future__ import annotations

from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.modules import NormModule

__all__ = ["arrange", "head_layout"]


def arrange(
    q: Any,
    strides: tuple[int, ...],
    bt: tuple[int, int] | None,
    spec: NormModule,
    known: str | None,
    forced: str | None = None,
) -> tuple[Any, str]:
    """Reshape the per-vector q (lead axes + groups) to [B, T, H] and name the layout."""
    groups = int(q.shape[-1])
    lead = tuple(int(n) for n in q.shape[:-1])
    where = f"module {spec.name!r}: input of shape {lead} + normalized axes"

    def out(v: Any, layout: str) -> tuple[Any, str]:
        b_n, t_n = int(v.shape[0]), int(v.shape[1])
        return v.reshape(b_n, t_n, -1), layout

    if bt is None:
        if len(lead) == 2:
            return out(q, "tokens [B, T, D]" if groups == 1 else "groups [B, T, G, D]")
        raise CaptureError(
            f"{where}: the batch and sequence axes are unknown (call the model with "
            "input_ids or inputs_embeds as keyword arguments)"
        )
    b, t = bt
    if len(lead) == 2 and lead == (b, t):
        return out(q, "tokens [B, T, D]" if groups == 1 else "groups [B, T, G, D]")
    if len(lead) == 1 and b * t > 0 and lead[0] % (b * t) == 0:
        h = lead[0] // (b * t)
        if h == 1:
            return out(q.reshape(b, t, groups), "tokens [B*T, D]")
        return out(q.reshape(b, t, h * groups), "heads [B*T*H, D]")
    if len(lead) == 2 and lead[0] == b * t and lead != (b, t):
        return out(q.reshape(b, t, -1), "heads [B*T, H, D]")
    if len(lead) == 3 and lead[0] == b:
        layout = head_layout(lead, strides, t, known, spec, forced)
        if layout == "bthd":
            return out(q, "heads [B, T, H, D]")
        if layout == "bhtd":
            return out(q.transpose(1, 2), "heads [B, H, T, D]")
    raise CaptureError(f"{where} does not match the call's batch {b} and sequence length {t}")


def head_layout(
    lead: tuple[int, ...],
    strides: tuple[int, ...],
    t: int,
    known: str | None,
    spec: NormModule,
    forced: str | None = None,
) -> str | None:
    """'bthd' or 'bhtd' for a [B, ?, ?] lead (see the module docstring), None: no match."""
    a1, a2 = lead[1] == t, lead[2] == t
    if a1 != a2:
        return "bthd" if a1 else "bhtd"
    if not a1:
        return None
    if known is not None:
        return "bthd" if "[B, T, H" in known else "bhtd"
    s1, s2 = strides[1], strides[2]
    by_t1 = s1 == lead[2] * s2 and s2 != lead[1] * s1
    by_t2 = s2 == lead[1] * s1 and s1 != lead[2] * s2
    if by_t1 != by_t2:
        return "bthd" if by_t1 else "bhtd"
    if forced is not None:
        return forced
    raise CaptureError(
        f"module {spec.name!r} ({spec.class_name}): input {lead} + normalized axes has "
        f"T == H == {t} and strides {strides} that do not tell the token axis; rerun with "
        "a batch whose padded length differs from the head count, or pass head_layout"
    )
