"""What a capture returns: one frozen record per hooked module, and the whole capture."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmsnorm_eps.summary import LayerAccumulator

__all__ = ["CaptureResult", "ModuleRecord"]


@dataclass(frozen=True)
class ModuleRecord:
    """What was captured at one module.

    ``eps`` is the live epsilon (None if the module never ran); ``dim`` the number of elements
    each q averages; ``heads`` the number of q values per token (1 for token norms).
    ``norm``, ``reason``, ``bias``, ``group_size``, ``gate_before``, ``gate_fn``,
    ``input_scale``, ``eps_rule``, ``inputs``, ``channels_first``: what the module computes, as
    :class:`~rmsnorm_eps.capture.classify.NormKind` says (``norm`` None if it never ran,
    'unknown' with ``reason`` when it is not analysed); q is the quantity it divides by (v for
    a LayerNorm). ``max_calls``: the most calls in one forward pass (a module normalizing q and
    k in one call counts two).
    Full mode: ``q`` (float64), ``position``, ``batch``, ``head``, ``call`` (int64), all of
    length ``count``. Summary mode: ``summaries`` maps "all", "first" (position 0) and "other"
    (positions > 0) to the analyzer's :class:`LayerAccumulator` over the q values the dump would
    store (float32); every index in them is the value's index in the dump's array.
    """

    name: str
    class_name: str
    kind: str
    eps: float | None
    eps_source: str | None
    dim: int | None
    input_dtype: str | None
    gain: str
    weight: dict[str, float] | None
    weight_dtype: str | None
    layout: str | None
    heads: int
    calls: int
    count: int
    q: np.ndarray | None = None
    position: np.ndarray | None = None
    batch: np.ndarray | None = None
    head: np.ndarray | None = None
    summaries: dict[str, LayerAccumulator] | None = None
    norm: str | None = None
    reason: str | None = None
    bias: bool = False
    group_size: int | None = None
    gate_before: bool | None = None
    max_calls: int = 0
    call: np.ndarray | None = None
    gate_fn: str | None = None
    input_scale: str | None = None
    eps_rule: str = "add"
    inputs: int = 1
    channels_first: bool = False


@dataclass(frozen=True)
class CaptureResult:
    """All modules' records, in the model's module order (``top_k``: worst inputs kept per
    summary)."""

    modules: tuple[ModuleRecord, ...]
    sequences: int
    tokens: int
    summary_only: bool
    q_dtype: str
    min_ratio: float | None
    top_k: int = 5
