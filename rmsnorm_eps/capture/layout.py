"""Where the token and head axes of a norm's input are: the per-vector q arranged [B, T, H].

A token norm sees ``[B, T, D]``, ``[B*T, D]`` or, in a sequence-first model (XLNet, FSMT),
``[T, B, D]``; a per-head norm ``[B, T, H, D]``, the transposed view ``[B, H, T, D]``,
``[B*T, H, D]`` or ``[B*T*H, D]``. B and T are the call's batch size and sequence length.

The layout is read from evidence, never from a coincidence of sizes:

* the sizes, when only one reading fits them (``[B, T]`` with B != T, the axis of size T
  when T != H);
* when two readings fit (B == T for a token norm, T == H for a per-head norm): the layout the
  module had on an earlier call, or one found by a probe (the capture reruns the forward pass
  with one sequence fewer, or one token shorter: :class:`LayoutAmbiguous` says which), or, for
  a per-head norm, the strides (the token axis of a projection's output has stride H*D both in
  ``[B, T, H, D]`` and in the transposed view ``[B, H, T, D]``); a reading of size-1 axes where
  both readings are the same array needs no evidence;
* a module whose sequence axis has another length L than the call's: ``[B, L, D]`` with L the
  length the model padded its input to is the call's tokens followed by the model's padding.
  That length is seen at the input embeddings (Longformer pads its ids to a multiple of its
  attention window: the input ids followed by pad ids), or in the mask the model's own layers
  are called with (PEGASUS-X pads its hidden states to a multiple of its block size, LED embeds
  its window padding in a second call: a 2-D ``attention_mask`` [B, L] whose real tokens are
  exactly the call's, followed by padding). ``[B, P + T, D]`` with P the prompt vectors the
  model put before the ids (CPM-Ant: its input embeddings see P prompt ids followed by the
  input ids) is P prompt vectors, then the call's tokens: the prompt is no token. Any other L
  (a compressed or block-global sequence: a KV compressor's windows, LongT5's transient-global
  tokens) is captured on its own axis: position = the index on that axis, every vector kept
  (no padding mask maps onto it); such a q waits for the end of the forward pass, so that a
  later layer's mask may still show L to be the padded length;
* an input that is a weight of the model (a parameter or buffer, or a view of one) has no
  token axis whatever its sizes: ``[B, L, D]`` (learned queries expanded over the batch) is on
  its own axis, anything else (DeBERTa-v2's relative-position embeddings ``[2 * buckets, D]``,
  whose row count may equal B * T) has no layout.

Nothing else is guessed: :class:`LayoutUnknown` (the module is listed, not analysed).
"""

from __future__ import annotations

import math
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.modules import NormModule

__all__ = [
    "LayoutAmbiguous",
    "LayoutUnknown",
    "head_layout",
    "orientation",
    "place",
    "plan",
]

OWN_AXIS = "own axis"
MODEL_PADDED = "model-padded"
PROMPTED = "prompted"


class LayoutUnknown(CaptureError):
    """No evidence tells the module's layout: it is listed with this reason, not analysed."""


class LayoutAmbiguous(LayoutUnknown):
    """Two layouts fit the sizes; a probe rerun with another ``probe`` ('batch': one sequence
    fewer; 'length': one token shorter) may tell."""

    def __init__(self, message: str, probe: str) -> None:
        super().__init__(message)
        self.probe = probe


def orientation(layout: str | None) -> str | None:
    """'tb' (sequence-first), 'bthd', 'bhtd', 'flat' or 'bt' (batch-first) of a layout name."""
    if layout is None:
        return None
    if "[T, B" in layout:
        return "tb"
    if "[B, T, H" in layout:
        return "bthd"
    if "[B, H, T" in layout:
        return "bhtd"
    if "*" in layout:
        return "flat"
    return "bt"


def _tokens(groups: int, prefix: str = "tokens", axes: str = "B, T") -> str:
    if groups == 1:
        return f"{prefix} [{axes}, D]"
    return f"{'groups' if prefix == 'tokens' else prefix} [{axes}, G, D]"


def plan(
    lead: tuple[int, ...],
    groups: int,
    strides: tuple[int, ...],
    bt: tuple[int, int] | None,
    spec: NormModule,
    known: str | None,
    forced: str | None = None,
    evidence: dict[str, int] | None = None,
) -> tuple[str, bool]:
    """The layout of a q of shape ``lead + (groups,)`` (see the module docstring) and whether
    it is evidence (False: size-1 axes where every reading is the same array). ``evidence``:
    what the call showed (``padded``: the model's padded length; ``prefix``: its prompt
    vectors before the ids; ``weight_input``: the input is a weight of the model).

    Raises :class:`LayoutAmbiguous` or :class:`LayoutUnknown`.
    """
    where = f"module {spec.name!r} ({spec.class_name}): input of shape {lead} + normalized axes"
    if bt is None:
        if len(lead) == 2:
            return _tokens(groups), True
        raise LayoutUnknown(
            f"layout unknown: {where}: the batch and sequence axes are unknown (call the model "
            "with input_ids or inputs_embeds)"
        )
    b, t = bt
    if (evidence or {}).get("weight_input"):
        return _weight_rows(lead, groups, b, where)
    extra = (evidence or {}).get("padded"), (evidence or {}).get("prefix")
    if len(lead) == 2 and (found := _plan_2d(lead, groups, (b, t), known, extra, where)):
        return found
    if len(lead) == 1 and b * t > 0 and lead[0] % (b * t) == 0:
        h = lead[0] // (b * t)
        if h > 1:
            return "heads [B*T*H, D]", True
        return ("tokens [B*T, D]" if groups == 1 else "groups [B*T, G, D]"), True
    if len(lead) == 3 and lead[0] == b:
        layout = head_layout(lead, strides, t, known, spec, forced)
        if layout is not None:
            told = not (lead[1] == lead[2] == t == 1)
            return ("heads [B, T, H, D]" if layout == "bthd" else "heads [B, H, T, D]"), told
    raise LayoutUnknown(
        f"layout unknown: {where} does not match the call's batch {b} and sequence length {t}"
    )


def _plan_2d(
    lead: tuple[int, ...],
    groups: int,
    bt: tuple[int, int],
    known: str | None,
    extra: tuple[int | None, int | None],
    where: str,
) -> tuple[str, bool] | None:
    """A ``[?, ?]`` lead: batch-first, sequence-first, flattened heads, model-padded, prompted,
    own axis (None: none of them). ``extra``: the model's padded length and prompt length."""
    b, t = bt
    padded, prefix = extra
    bf, sf = lead == (b, t), lead == (t, b)
    if bf and sf:  # B == T
        if b == 1:
            return _tokens(groups), False
        side = orientation(known)
        if side == "tb":
            return _tokens(groups, axes="T, B"), True
        if side == "bt":
            return _tokens(groups), True
        raise LayoutAmbiguous(
            f"layout unknown: {where}: batch and sequence length are both {b}, and neither an "
            "earlier call nor a probe with one sequence fewer told [B, T] from [T, B]",
            "batch",
        )
    if bf:
        return _tokens(groups), True
    if sf:
        return _tokens(groups, axes="T, B"), True
    if lead[0] == b * t:
        return "heads [B*T, H, D]", True
    if lead[0] == b and orientation(known) != "tb":
        if padded is not None and lead[1] == padded and padded > t:
            return _tokens(groups, MODEL_PADDED, "B, T+pad"), True
        if prefix is not None and prefix > 0 and lead[1] == t + prefix:
            return _tokens(groups, PROMPTED, "B, P+T"), True
        return _tokens(groups, OWN_AXIS, "B, L"), True
    return None


def _weight_rows(lead: tuple[int, ...], groups: int, b: int, where: str) -> tuple[str, bool]:
    """The layout of a weight's rows: its own axis when expanded over the batch ([B, L]),
    else no layout (DeBERTa-v2's relative-position embeddings, [2 * buckets, D])."""
    if len(lead) == 2 and lead[0] == b:
        return _tokens(groups, OWN_AXIS, "B, L"), True
    raise LayoutUnknown(
        f"layout unknown: {where}: its input is a weight of the model (a parameter or buffer), "
        "whose rows are no tokens"
    )


def place(q: Any, layout: str, bt: tuple[int, int] | None) -> Any:
    """q (lead axes + groups) arranged [B, L, H] for a layout of :func:`plan` (L = T, except
    on a module's own axis or the model's padded length)."""
    flat = ("[B, T, D]", "[B, T, G, D]", "[B, L", "[B, T+pad", "[B, P+T")
    if bt is None or any(a in layout for a in flat):  # an empty axis (L = 0) stays empty
        return q.reshape(int(q.shape[0]), int(q.shape[1]), math.prod(int(n) for n in q.shape[2:]))
    b, t = bt
    if "[T, B" in layout:
        return q.transpose(0, 1).reshape(b, t, -1)
    if layout == "heads [B, H, T, D]":
        return q.transpose(1, 2).reshape(b, t, -1)
    return q.reshape(b, t, -1)


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
    if t == 1:
        return "bthd"  # T == H == 1: both readings are the same array
    side = orientation(known)
    if side in ("bthd", "bhtd"):
        return side
    s1, s2 = strides[1], strides[2]
    by_t1 = s1 == lead[2] * s2 and s2 != lead[1] * s1
    by_t2 = s2 == lead[1] * s1 and s1 != lead[2] * s2
    if by_t1 != by_t2:
        return "bthd" if by_t1 else "bhtd"
    if forced is not None:
        return forced
    raise LayoutAmbiguous(
        f"layout unknown: module {spec.name!r} ({spec.class_name}): input {lead} + normalized "
        f"axes has T == H == {t} and strides {strides} that do not tell the token axis, nor did "
        "an earlier call or a probe one token shorter; rerun with a batch whose padded length "
        "differs from the head count, or pass head_layout",
        "length",
    )
