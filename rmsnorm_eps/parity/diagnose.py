"""One line naming the failure pattern and the next thing to inspect.

The patterns follow the reference document: small inputs only -> q/eps (eps value or
placement); large magnitudes only -> intermediates (overflow); particular channels -> gain and
broadcasting; one factor for every element -> gain convention (such as 1 + w).
"""

from __future__ import annotations

from rmsnorm_eps.parity.infer import Inference
from rmsnorm_eps.parity.probes import SMALL_CATEGORIES
from rmsnorm_eps.parity.rules import CategoryResult

__all__ = ["diagnose"]

#: torch.nn.RMSNorm(eps=None) on float16/bfloat16/float32 uses float32's machine epsilon.
FLOAT32_EPS = 1.1920928955078125e-07


def _eps_text(inf: Inference) -> str:
    if inf.eps is None:
        return f"eps not inferred ({inf.note})"
    text = f"inferred eps {inf.eps:.4g} ({inf.eps_ratio:.3g}x configured {inf.configured_eps:.4g})"
    if inf.placement != "undetermined":
        text += f", placement {inf.placement}"
    else:
        text += f", placement undetermined ({inf.note})"
    return text


def _eps_hint(inf: Inference, dim: int) -> str:
    if inf.eps is None:
        return "check where and how eps enters the denominator"
    unc = max(inf.rel_uncertainty or 0.0, 0.01)
    if abs(inf.eps / FLOAT32_EPS - 1.0) <= 2.0 * unc:
        return "it equals float32 machine epsilon: torch.nn.RMSNorm / F.rms_norm with eps=None"
    if abs(inf.eps * dim / inf.configured_eps - 1.0) <= 2.0 * unc:
        return f"it equals eps/d (d={dim}): eps added to the sum of squares instead of the mean"
    if inf.eps_matches and inf.placement == "inside":
        return (
            "eps and placement match, so q itself is off for small inputs: squares that "
            "underflow or a low-precision reduction"
        )
    if inf.placement in ("outside", "clamp"):
        where = "outside the square root" if inf.placement == "outside" else "in a clamp"
        return f"eps sits {where}; the reference adds it to mean(x^2) inside sqrt"
    return "check the eps the implementation resolves (config key, framework default)"


def diagnose(categories: tuple[CategoryResult, ...], inference: Inference, dim: int) -> str:
    """The one-line diagnosis: verdict, pattern, and what to inspect next."""
    failed = [c.name for c in categories if not c.passed]
    nonfinite = sum(c.nan + c.inf for c in categories)
    gain = inference.gain
    eps_off = inference.eps_matches is False or inference.placement in ("outside", "clamp")
    if not failed:
        if eps_off:
            return f"PASS within tolerance, but {_eps_text(inference)}: {_eps_hint(inference, dim)}"
        return f"PASS: all {len(categories)} categories within tolerance; {_eps_text(inference)}"
    parts = []
    if nonfinite:
        parts.append(f"{nonfinite} nonfinite output(s)")
    if not gain.ok and gain.kind != "undetermined":
        factor = f"{gain.factor:.4g}" if gain.factor is not None else "?"
        if gain.kind == "1+w":
            parts.append(
                f"gain convention: 1 + w applied where w was meant (median channel "
                f"factor {factor}); check how the weight is stored and applied"
            )
        elif gain.kind == "w":
            parts.append(
                f"gain convention: w applied where 1 + w was meant (median channel "
                f"factor {factor}); add the 1 (e.g. Gemma, zero-centered gamma)"
            )
        elif gain.kind == "ignored":
            parts.append("the gain is not applied (output matches a unit gain)")
        elif gain.kind == "uniform":
            parts.append(
                f"uniform factor {factor} on every element: gain convention or a "
                "scale applied twice"
            )
        else:
            chans = ", ".join(str(c) for c in gain.channels)
            parts.append(f"particular channels differ ({chans}): inspect gain and broadcasting")
    if "large" in failed and "ordinary" not in failed:
        parts.append(
            "large-magnitude probes fail: overflow in intermediates (x^2 or its sum "
            "exceeds the dtype); square and reduce in float32 or scale by max|x|"
        )
    small_failed = [c for c in failed if c in SMALL_CATEGORIES]
    if small_failed and (gain.ok or gain.kind == "undetermined"):
        parts.append(
            f"small inputs fail ({', '.join(small_failed)}): {_eps_text(inference)}; "
            f"{_eps_hint(inference, dim)}"
        )
    elif small_failed and eps_off:
        parts.append(_eps_text(inference))
    if not parts:
        parts.append(
            f"categories {', '.join(failed)} fail: compare intermediates one "
            "change at a time (dtype of reduction, evaluation order, fusion)"
        )
    return "FAIL: " + "; ".join(parts)
