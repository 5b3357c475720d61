"""capture/report.py: how a module that was not analysed is worded."""

from __future__ import annotations

from rmsnorm_eps.capture.report import why_not_analysed


def test_a_known_kind_whose_layout_is_unknown_is_not_called_an_unknown_kind() -> None:
    reason = "not analysed (rms norm): layout unknown: [3, 3, 8] fits [B, T, D] and [T, B, D]"
    assert (
        why_not_analysed(reason)
        == "(rms norm): layout unknown: [3, 3, 8] fits [B, T, D] and [T, B, D]"
    )
    assert why_not_analysed("output matches no formula") == (
        "unknown norm kind: output matches no formula"
    )
    assert why_not_analysed(None) == "unknown norm kind: -"
