"""The mutable state :class:`~rmsnorm_eps.capture.hooks.QCapture`'s hooks share.

:class:`NormState`: what one hooked norm module has recorded (its kind, eps, layout, the q
values of its real tokens or their streaming summaries). :class:`CallContext`: what the
innermost hooked stack (the model, or its encoder or decoder) was called with.
:class:`PendingQ`: one module call's q, still on the device, until the forward pass ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmsnorm_eps.capture.classify import NormKind
from rmsnorm_eps.capture.modules import NormModule
from rmsnorm_eps.engine import PositionSplit
from rmsnorm_eps.summary import LayerAccumulator

__all__ = ["CallContext", "NormState", "PendingQ"]


@dataclass
class NormState:
    """What one hooked norm module has recorded so far (see the module docstring)."""

    spec: NormModule
    module: Any
    eps: float | None = None
    eps_source: str | None = None
    dim: int | None = None
    input_dtype: str | None = None
    layout: str | None = None
    heads: int = 1
    calls: int = 0
    count: int = 0
    q: list[np.ndarray] = field(default_factory=list)
    position: list[np.ndarray] = field(default_factory=list)
    batch: list[np.ndarray] = field(default_factory=list)
    head: list[np.ndarray] = field(default_factory=list)
    call: list[np.ndarray] = field(default_factory=list)
    summary: LayerAccumulator | None = None
    split: PositionSplit[LayerAccumulator] | None = None
    kind: NormKind | None = None
    inner_ndim: int = 1
    max_calls: int = 0
    skipped: str | None = None  # why the module is listed, not analysed (layout unknown, ...)


@dataclass(frozen=True)
class CallContext:
    """What the innermost hooked stack (the model, or its encoder or decoder) was called with.

    ``ids``: its input ids (on their device) when it got them; ``evidence`` holds what the
    input embeddings and the model's layers saw in this call (``padded``: the length the model
    padded its input to; ``prefix``: the prompt vectors it put before the ids).
    """

    bt: tuple[int, int] | None
    mask: Any  # bool [B, T] on the host, or None
    ids: Any = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingQ:
    """One module call's q, still on the device, arranged [B, T, H] (or, while ``probe`` names
    the probe that may tell its layout, as the module computed it: lead axes + groups;
    ``probe`` 'evidence': a q on its own axis, placed when the forward pass has ended)."""

    state: NormState
    q: Any
    mask: Any
    offset: int
    call: int
    probe: str | None = None
    ctx: CallContext | None = None
    strides: tuple[int, ...] = ()
