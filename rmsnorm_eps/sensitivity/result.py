"""The frozen results of ``rmsnorm-eps sensitivity`` (no torch here: reporters import this).

Per position class (position 0, the first real token of a text, and positions >= 1), over the
real tokens t (padding excluded by the attention mask), with z the logits, p = softmax(z) of
the base and p' of the changed model (log_softmax in float64):

* ``kl``: mean_t sum_v p_v (log p_v - log p'_v), nats (``kl`` positions >= 1, ``kl_first``
  position 0);
* ``top1_agreement``: fraction of tokens with argmax z == argmax z';
* ``max_abs_logit_change``: max_t,v |z'_v - z_v| over every real token;
* ``nmse_last``: sum_seq ||z' - z||^2 / sum_seq ||z||^2 at each text's last real token;
* ``perplexity``: exp(mean negative log-likelihood of each next real token) under the
  changed model (the base's is :attr:`SensitivityResult.perplexity_base`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "Change",
    "ChangeResult",
    "Metrics",
    "NormInfo",
    "NormRow",
    "PassCount",
    "ScreenCheck",
    "SensitivityGate",
    "SensitivityResult",
    "Suggestion",
    "Timing",
    "evaluate_gate",
    "failing",
]


@dataclass(frozen=True)
class Change:
    """One change: ``to`` (a SPEC text, or ``eps=V``) applied to the norms, from ``base``.

    ``attribute``: ``--eps V`` sets each norm's eps attribute (the module's own forward and
    dtype rules); else both sides run the replacement forward of
    :mod:`rmsnorm_eps.sensitivity.swap` (``base`` the ``--from`` SPEC, ``to`` the ``--to``).
    """

    label: str
    base: str | None
    to: str
    attribute: bool


@dataclass(frozen=True)
class Metrics:
    """What a change does to the outputs (see the module docstring)."""

    kl: float | None
    kl_first: float | None
    top1_agreement: float | None
    top1_agreement_first: float | None
    max_abs_logit_change: float
    nmse_last: float
    perplexity: float | None
    tokens: int
    tokens_first: int


@dataclass(frozen=True)
class NormInfo:
    """A norm module: what it computes (``norm``: rms, layer, gated-rms, l2), its live eps,
    role (input, post-attention, pre-feedforward, post-feedforward, q/k, final, other),
    ``min_q_over_eps`` over every real token of the base pass (v/eps for a LayerNorm), and
    ``layer``: the decoder layers finished before it first runs (what a swap can reuse)."""

    name: str
    class_name: str
    norm: str
    eps: float
    role: str
    min_q_over_eps: float | None
    layer: int


@dataclass(frozen=True)
class NormRow:
    """One norm (or one role) changed alone. ``estimated``: ``metrics`` is None and ``kl`` is
    the screening estimate (second order, see :mod:`rmsnorm_eps.sensitivity.screen`);
    ``share``: kl / the sum of kl over the rows."""

    name: str
    role: str
    kl: float | None
    estimated: bool
    share: float | None
    min_q_over_eps: float | None
    metrics: Metrics | None
    #: an estimated row not shown to rank below the exact ones (:class:`ScreenCheck`)
    uncertain: bool = False


@dataclass(frozen=True)
class Suggestion:
    """From a sweep of eps values (every norm of ``group``, ``model`` meaning all of them):
    the largest and smallest eps, reached from the configured ``eps`` without a failing
    point between, whose KL (both position classes) stays <= ``max_kl`` (and top-1 agreement
    >= ``min_top1`` when given); ``points`` (eps, kl, kl_first) in increasing eps."""

    group: str
    eps: float
    largest: float | None
    smallest: float | None
    points: tuple[tuple[float, float | None, float | None], ...]
    #: no point up to the sweep's end failed: the limit is beyond the sweep (``largest`` is
    #: the sweep's edge, not a limit found); ``smallest_beyond`` the same downwards
    largest_beyond: bool = False
    smallest_beyond: bool = False


@dataclass(frozen=True)
class PassCount:
    """Cost in passes of the texts: decoder-layer evaluations / (layers x batches).

    ``forward``: forward passes (a suffix run of k of n layers counts k/n); ``backward``:
    backward passes of the screening (each through every layer); ``equivalent`` = forward +
    2 * backward (a backward costs about two forwards); ``naive``: the forward passes of the
    plain loop (a base pass, then one full pass per change, norm, role and sweep point)."""

    forward: float
    backward: float
    equivalent: float
    naive: float
    layers: int
    batches: int
    timing: Timing | None = None


@dataclass(frozen=True)
class Timing:
    """The cost in forward-pass times, from timing this process: ``pass_seconds`` one
    forward pass of the texts (per batch the fastest full forward timed: a base pass or a
    variant run from layer 0); ``layers`` the decoder-layer evaluations run
    (counted, as passes) times the layers' share of a pass, ``head`` the runs of the rest of
    the model times the head's share (the output head's calls timed), ``metric`` and
    ``screen`` (the draws, backward passes and products of ``--exact-top``) their timed
    seconds / pass_seconds; ``total`` their sum; ``measured`` the whole run's wall time
    (``seconds``) / pass_seconds. Not deterministic: a property of the machine."""

    pass_seconds: float
    seconds: float
    layers: float
    head: float
    metric: float
    screen: float

    @property
    def total(self) -> float:
        return self.layers + self.head + self.metric + self.screen

    @property
    def measured(self) -> float:
        return self.seconds / self.pass_seconds if self.pass_seconds > 0 else math.nan


@dataclass(frozen=True)
class ChangeResult:
    """One change in every norm at once (``all``), per norm and per role."""

    change: Change
    all: Metrics
    per_norm: tuple[NormRow, ...]
    per_role: tuple[NormRow, ...]
    #: how sure the screened ranking is (``--exact-top``), else None
    screen: ScreenCheck | None = None


#: standard errors of the screening estimate in :class:`ScreenCheck`'s margin
SCREEN_Z = 3.0


@dataclass(frozen=True)
class ScreenCheck:
    """Whether the rows beyond the exact ones are known to rank below them. ``asked`` K;
    ``exact`` the rows measured exactly (K, plus the extension); ``kth_kl`` the K-th largest
    exact KL; ``ratio`` the largest exact KL / estimate among the exact rows of KL >= a
    tenth of kth_kl (at least 1: the second-order estimate's own error, seen). An estimated
    row is clearly below when (estimate + SCREEN_Z standard errors of its draws) * ratio <
    kth_kl. ``sure``: every estimated row is; else the rows not shown to be
    (``NormRow.uncertain``) may rank wrong (the extension stops at ``limit`` exact rows)."""

    asked: int
    exact: int
    kth_kl: float | None
    ratio: float
    sure: bool
    limit: int


@dataclass(frozen=True)
class SensitivityResult:
    """``rmsnorm-eps sensitivity``'s result."""

    command: ClassVar[str] = "sensitivity"

    model: str
    source: str
    texts: int
    tokens: int
    tokens_first: int
    norms: tuple[NormInfo, ...]
    changes: tuple[ChangeResult, ...]
    perplexity_base: float | None
    passes: PassCount
    suggestions: tuple[Suggestion, ...] = ()
    screen_samples: int = 0
    ranks: int = 1
    #: ``--max-kl``/``--min-top1`` evaluated (:func:`evaluate_gate`), or None without a gate
    gate: SensitivityGate | None = None
    #: the --from SPEC whose perplexity ``perplexity_base`` is (None: the model as loaded)
    perplexity_base_from: str | None = None


@dataclass(frozen=True)
class SensitivityGate:
    """``--max-kl`` (KL of either position class, nats) and ``--min-top1`` (top-1 agreement of
    either class) over each change in every norm; ``failures`` name the changes."""

    max_kl: float | None
    min_top1: float | None
    passed: bool
    failures: tuple[str, ...]
    reason: str


def kl_fails(m: Metrics, max_kl: float | None) -> bool:
    """KL of some position class > ``max_kl`` (equal passes; NaN fails)."""
    if max_kl is None:
        return False
    return any(v is not None and not v <= max_kl for v in (m.kl, m.kl_first))


def top1_fails(m: Metrics, min_top1: float | None) -> bool:
    """Top-1 agreement of some position class < ``min_top1`` (equal passes)."""
    if min_top1 is None:
        return False
    vals = (m.top1_agreement, m.top1_agreement_first)
    return any(v is not None and not v >= min_top1 for v in vals)


def failing(m: Metrics, max_kl: float | None, min_top1: float | None) -> list[str]:
    """Each failing criterion of ``m``, with its position class and value: ``KL at positions
    >= 1 0.0073 > --max-kl 0.001``, ``top-1 at position 0 0.5 < --min-top1 0.9``."""
    out = []
    classes = (
        ("positions >= 1", m.kl, m.top1_agreement),
        ("position 0", m.kl_first, m.top1_agreement_first),
    )
    for where, kl, top1 in classes:
        if max_kl is not None and kl is not None and not kl <= max_kl:
            out.append(f"KL at {where} {kl:.4g} > --max-kl {max_kl:g}")
        if min_top1 is not None and top1 is not None and not top1 >= min_top1:
            out.append(f"top-1 at {where} {top1:.4g} < --min-top1 {min_top1:g}")
    return out


def evaluate_gate(
    result: SensitivityResult, max_kl: float | None, min_top1: float | None
) -> SensitivityGate:
    """The gate over every change's all-norms metrics (unrounded values)."""
    failures = tuple(
        c.change.label
        for c in result.changes
        if kl_fails(c.all, max_kl) or top1_fails(c.all, min_top1)
    )
    if max_kl is None and min_top1 is None:
        reason = "no gate (give --max-kl or --min-top1)"
    elif failures:
        why = "; ".join(
            f"{c.change.label}: {', '.join(failing(c.all, max_kl, min_top1))}"
            for c in result.changes
            if c.change.label in failures
        )
        reason = f"{len(failures)} of {len(result.changes)} change(s) exceed the gate: {why}"
    else:
        reason = f"{len(result.changes)} change(s) within the gate"
    return SensitivityGate(max_kl, min_top1, not failures, failures, reason)
