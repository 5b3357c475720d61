"""A pytest helper: ``assert_eps_safe(q_or_x, eps=...)`` fails with a readable message.

from rmsnorm_eps.testing import assert_eps_safe

def test_norm_inputs_are_far_from_eps(activations):
    assert_eps_safe({"layers.0.input_layernorm": activations}, eps=1e-5, raw=True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from rmsnorm_eps.api import CheckFields

__all__ = ["assert_eps_safe"]


def assert_eps_safe(
    data: object, eps: float | Mapping[str, float], **fields: Unpack[CheckFields]
) -> None:
    """Raise AssertionError naming each violating layer (its violations, min q/eps, min A and
    worst input) unless every input passes ``A >= 1 - delta`` within the budget; the same
    analysis, and the same keywords, as :func:`rmsnorm_eps.check`."""
    from rmsnorm_eps.api import check

    result = check(data, eps, **fields)
    if result.passed:
        return
    report = result.report
    lines = [
        f"eps attenuates {result.violations} input(s) beyond the bound "
        f"(A >= {1 - report.delta:g}, q/eps >= {report.min_ratio:.10g}): {result.gate.reason}"
    ]
    for layer in report.layers:
        if not layer.violations:
            continue
        worst = layer.worst[0] if layer.worst else None
        where = f", worst at {list(worst.index)}" if worst is not None else ""
        lines.append(
            f"  {layer.name}: {layer.violations} of {layer.count} "
            f"(below bound {layer.below_bound}, nonfinite {layer.nonfinite}); "
            f"min q/eps {layer.min_ratio:.6g}, min A {layer.min_attenuation:.6g}{where}"
        )
    raise AssertionError("\n".join(lines))
