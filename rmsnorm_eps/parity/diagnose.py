"""One line naming the failure pattern and the next thing to inspect.

The patterns follow the reference document: small inputs only -> q/eps (eps value or
placement); large magnitudes only -> intermediates (overflow); particular channels -> gain and
broadcasting; one factor for every element -> gain convention (such as 1 + w).
"""

from __future__ import annotations

from rmsnorm_eps.parity.infer import Inference
from rmsnorm_eps.parity.probe_set import SMALL_CATEGORIES
from rmsnorm_eps.parity.rules import CategoryResult

__all__ = ["diagnose"]

#: torch.nn.RMSNorm(eps=None) on float16/bfloat16/float32 uses float32's machine epsilon.
FLOAT32_EPS = 1.1920928955078125e-07


def _eps_text(inf: Inference) -> str:
    if inf.eps is None:
        return f"eps not inferred ({inf.note})"
    text = f"inferred eps {inf.eps:.4g} ({inf.eps_ratio:.3g}x configured {inf.configured_eps:.4g})"
    why = f" ({inf.note})" if inf.placement == "undetermined" else ""
    return f"{text}, placement {inf.placement}{why}"


def _eps_hint(inf: Inference, dim: int, norm: str = "rms") -> str:
    if inf.eps is None:
        return "check where and how eps enters the denominator"
    unc = max(inf.rel_uncertainty or 0.0, 0.01)
    if norm == "rms" and abs(inf.eps / FLOAT32_EPS - 1.0) <= 2.0 * unc:
        return "it equals float32 machine epsilon: torch.nn.RMSNorm / F.rms_norm with eps=None"
    if abs(inf.eps * dim / inf.configured_eps - 1.0) <= 2.0 * unc:
        return f"it equals eps/d (d={dim}): eps added to the sum of squares instead of the mean"
    quantity = "mean(x^2)" if norm == "rms" else "the variance v = mean((x - mean x)^2)"
    if inf.eps_matches and inf.placement == "inside":
        if norm == "layer":
            return (
                "eps and placement match, so v itself is off for small inputs: the mean not "
                "removed before squaring (one-pass variance) or a low-precision reduction"
            )
        return (
            "eps and placement match, so q itself is off for small inputs: squares that "
            "underflow or a low-precision reduction"
        )
    if inf.placement in ("outside", "clamp"):
        where = "outside the square root" if inf.placement == "outside" else "in a clamp"
        return f"eps sits {where}; the reference adds it to {quantity} inside sqrt"
    return "check the eps the implementation resolves (config key, framework default)"


_GAIN_TEXT = {
    "1+w": (
        "gain convention: 1 + w applied where w was meant (median channel "
        "factor {factor}); check how the weight is stored and applied"
    ),
    "w": (
        "gain convention: w applied where 1 + w was meant (median channel "
        "factor {factor}); add the 1 (e.g. Gemma, zero-centered gamma)"
    ),
    "ignored": "the gain is not applied (output matches a unit gain)",
    "uniform": (
        "uniform factor {factor} on every element: gain convention or a scale applied twice"
    ),
}


def _gain_part(inference: Inference) -> list[str]:
    """The gain finding, when the gain is wrong (and could be determined)."""
    gain = inference.gain
    if gain.ok or gain.kind == "undetermined":
        return []
    factor = f"{gain.factor:.4g}" if gain.factor is not None else "?"
    if gain.kind in _GAIN_TEXT:
        return [_GAIN_TEXT[gain.kind].format(factor=factor)]
    chans = ", ".join(str(c) for c in gain.channels)
    return [f"particular channels differ ({chans}): inspect gain and broadcasting"]


def _large_part(failed: list[str]) -> list[str]:
    if "large" in failed and "ordinary" not in failed:
        return [
            "large-magnitude probes fail: overflow in intermediates (x^2 or its sum "
            "exceeds the dtype); square and reduce in float32 or scale by max|x|"
        ]
    return []


def _variance_part(failed: list[str], inference: Inference, norm: str) -> list[str]:
    """LayerNorm: the large-mean probe fails while eps and gain are right -> a one-pass
    variance (mean(x^2) - mean(x)^2) cancelling."""
    if norm != "layer" or "mixed-scale" not in failed or _eps_off(inference):
        return []
    if not (inference.gain.ok or inference.gain.kind == "undetermined"):
        return []
    return [
        "mixed-scale probes fail (one has |mean| = 30 std): the variance cancels; remove "
        "the mean before squaring (two-pass or Welford), not mean(x^2) - mean(x)^2"
    ]


def _small_part(failed: list[str], inference: Inference, dim: int, norm: str) -> list[str]:
    small_failed = [c for c in failed if c in SMALL_CATEGORIES]
    if not small_failed:
        return []
    gain = inference.gain
    if gain.ok or gain.kind == "undetermined":
        return [
            f"small inputs fail ({', '.join(small_failed)}): {_eps_text(inference)}; "
            f"{_eps_hint(inference, dim, norm)}"
        ]
    if _eps_off(inference):
        return [_eps_text(inference)]
    return []


def _eps_off(inference: Inference) -> bool:
    return inference.eps_matches is False or inference.placement in ("outside", "clamp")


def diagnose(
    categories: tuple[CategoryResult, ...], inference: Inference, dim: int, norm: str = "rms"
) -> str:
    """The one-line diagnosis: verdict, pattern, and what to inspect next (``norm``: ``rms``
    or ``layer``, for the hints about what eps is added to)."""
    failed = [c.name for c in categories if not c.passed]
    if not failed:
        if _eps_off(inference):
            return (
                f"PASS within tolerance, but {_eps_text(inference)}: "
                f"{_eps_hint(inference, dim, norm)}"
            )
        return f"PASS: all {len(categories)} categories within tolerance; {_eps_text(inference)}"
    nonfinite = sum(c.nan + c.inf for c in categories)
    parts = [f"{nonfinite} nonfinite output(s)"] if nonfinite else []
    parts += _gain_part(inference)
    parts += _large_part(failed)
    parts += _variance_part(failed, inference, norm)
    parts += _small_part(failed, inference, dim, norm)
    if not parts:
        parts.append(
            f"categories {', '.join(failed)} fail: compare intermediates one "
            "change at a time (dtype of reduction, evaluation order, fusion)"
        )
    return "FAIL: " + "; ".join(parts)
