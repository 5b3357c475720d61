"""capture/layout.py: the [B, T, H] arrangement of a norm's per-vector q is read from evidence.

``plan`` names one layout when only one reading fits the sizes, uses an earlier layout or the
strides when two fit, and raises ``LayoutAmbiguous`` (with the probe that may tell) or
``LayoutUnknown`` otherwise. ``place`` (after ``plan``) is checked against hand-built tensors whose
values encode their (b, t, h) indices, so any wrong transpose shows.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.layout import (  # noqa: E402
    LayoutAmbiguous,
    LayoutUnknown,
    head_layout,
    orientation,
    place,
    plan,
)
from rmsnorm_eps.capture.modules import NormModule  # noqa: E402

SPEC = NormModule("model.norm", "LlamaRMSNorm", "RMSNorm-like", 1, "w")


def _code(b: int, t: int, h: int) -> float:
    return 100.0 * b + 10.0 * t + h


@pytest.mark.parametrize(
    ("layout", "want"),
    [
        (None, None),
        ("tokens [T, B, D]", "tb"),
        ("heads [B, T, H, D]", "bthd"),
        ("heads [B, H, T, D]", "bhtd"),
        ("heads [B*T*H, D]", "flat"),
        ("tokens [B, T, D]", "bt"),
    ],
)
def test_orientation(layout: str | None, want: str | None) -> None:
    assert orientation(layout) == want


def test_plan_token_layouts_from_sizes() -> None:
    assert plan((2, 5), 1, (5, 1), (2, 5), SPEC, None) == ("tokens [B, T, D]", True)
    assert plan((5, 2), 1, (2, 1), (2, 5), SPEC, None) == ("tokens [T, B, D]", True)
    assert plan((2, 5), 3, (5, 1), (2, 5), SPEC, None) == ("groups [B, T, G, D]", True)
    assert plan((10,), 1, (1,), (2, 5), SPEC, None) == ("tokens [B*T, D]", True)
    assert plan((10,), 4, (1,), (2, 5), SPEC, None) == ("groups [B*T, G, D]", True)
    assert plan((40,), 1, (1,), (2, 5), SPEC, None) == ("heads [B*T*H, D]", True)
    assert plan((10, 4), 1, (4, 1), (2, 5), SPEC, None) == ("heads [B*T, H, D]", True)
    # unknown B, T: a 2-D lead is read batch-first
    assert plan((3, 7), 1, (7, 1), None, SPEC, None) == ("tokens [B, T, D]", True)


def test_plan_b_equals_t_needs_evidence() -> None:
    assert plan((1, 1), 1, (1, 1), (1, 1), SPEC, None) == ("tokens [B, T, D]", False)
    assert plan((3, 3), 1, (3, 1), (3, 3), SPEC, "tokens [T, B, D]") == ("tokens [T, B, D]", True)
    assert plan((3, 3), 1, (3, 1), (3, 3), SPEC, "tokens [B, T, D]") == ("tokens [B, T, D]", True)
    with pytest.raises(LayoutAmbiguous, match="batch and sequence length are both 3") as info:
        plan((3, 3), 1, (3, 1), (3, 3), SPEC, None)
    assert info.value.probe == "batch"
    assert "'model.norm' (LlamaRMSNorm)" in str(info.value)


def test_plan_own_axis_and_model_padding() -> None:
    assert plan((2, 8), 1, (8, 1), (2, 5), SPEC, None) == ("own axis [B, L, D]", True)
    assert plan((2, 8), 1, (8, 1), (2, 5), SPEC, None, evidence={"padded": 8}) == (
        "model-padded [B, T+pad, D]",
        True,
    )
    # a padded length that is not this axis's: still its own axis
    assert (
        plan((2, 8), 1, (8, 1), (2, 5), SPEC, None, evidence={"padded": 6})[0]
        == "own axis [B, L, D]"
    )


def test_plan_unknown_layouts_name_the_module() -> None:
    with pytest.raises(LayoutUnknown, match="batch and sequence axes are unknown"):
        plan((2, 3, 4), 1, (12, 4, 1), None, SPEC, None)
    with pytest.raises(
        LayoutUnknown, match="does not match the call's batch 2 and sequence length 5"
    ):
        plan((3, 7), 1, (7, 1), (2, 5), SPEC, None)
    with pytest.raises(LayoutUnknown, match="does not match"):
        plan((2, 3, 4), 1, (12, 4, 1), (2, 5), SPEC, None)
    # a sequence-first module seen before: a [B, L] lead is not taken as its own axis
    with pytest.raises(LayoutUnknown, match="does not match"):
        plan((2, 8), 1, (8, 1), (2, 5), SPEC, "tokens [T, B, D]")


def test_head_layout_from_sizes_and_strides() -> None:
    assert head_layout((2, 5, 4), (80, 16, 4), 5, None, SPEC) == "bthd"
    assert head_layout((2, 4, 5), (80, 20, 4), 5, None, SPEC) == "bhtd"
    assert head_layout((2, 3, 4), (48, 16, 4), 5, None, SPEC) is None
    assert head_layout((2, 1, 1), (4, 4, 4), 1, None, SPEC) == "bthd"
    assert head_layout((2, 4, 4), (64, 16, 4), 4, "heads [B, H, T, D]", SPEC) == "bhtd"
    # T == H == 4, D = 8: contiguous [B, T, H, D] has strides (128, 32, 8)
    q = torch.zeros(2, 4, 4, 8)
    assert head_layout((2, 4, 4), tuple(q.stride()[:3]), 4, None, SPEC) == "bthd"
    # the transposed view of a projection's [B, T, H, D] output: token stride still H*D
    v = q.transpose(1, 2)
    assert head_layout((2, 4, 4), tuple(v.stride()[:3]), 4, None, SPEC) == "bhtd"


def test_head_layout_ambiguous_strides() -> None:
    # equal strides on the T and H axes: neither axis has the stride of the other times its size
    strides = (64, 4, 4)
    assert head_layout((2, 4, 4), strides, 4, None, SPEC, forced="bhtd") == "bhtd"
    with pytest.raises(LayoutAmbiguous, match="T == H == 4") as info:
        head_layout((2, 4, 4), strides, 4, None, SPEC)
    assert info.value.probe == "length"
    with pytest.raises(LayoutAmbiguous):
        plan((2, 4, 4), 1, strides, (2, 4), SPEC, None)
    assert plan((2, 4, 4), 1, strides, (2, 4), SPEC, None, forced="bthd") == (
        "heads [B, T, H, D]",
        True,
    )


def test_place_sequence_first_and_heads() -> None:
    b, t, h = 2, 3, 4
    want = torch.tensor([[[_code(i, j, k) for k in range(h)] for j in range(t)] for i in range(b)])
    # [T, B] token norm with H groups
    tb = want.permute(1, 0, 2).contiguous()
    assert torch.equal(place(tb, "groups [T, B, G, D]", (b, t)), want)
    # [B, H, T] per-head
    bhtd = want.permute(0, 2, 1).contiguous()
    assert torch.equal(place(bhtd.unsqueeze(-1), "heads [B, H, T, D]", (b, t)), want)
    # [B, T, H]
    assert torch.equal(place(want.unsqueeze(-1), "heads [B, T, H, D]", (b, t)), want)
    # [B*T*H]
    assert torch.equal(place(want.reshape(-1, 1), "heads [B*T*H, D]", (b, t)), want)
    # own axis: the module's length is kept
    own = torch.arange(2 * 7, dtype=torch.float64).reshape(2, 7, 1)
    assert tuple(place(own, "own axis [B, L, D]", (2, 5)).shape) == (2, 7, 1)


def test_plan_then_place() -> None:
    b, t, h = 2, 3, 4
    want = torch.tensor([[[_code(i, j, k) for k in range(h)] for j in range(t)] for i in range(b)])
    q = want.permute(1, 0, 2).contiguous()  # [T, B, G]
    layout, _ = plan((t, b), h, (b * h, h), (b, t), SPEC, None)
    assert layout == "groups [T, B, G, D]"
    assert torch.equal(place(q, layout, (b, t)), want)
