"""capture/calls.py: how a model (or stack) call is read: arguments bound by name, B and T
from the ids or the embeddings, the padding mask in the documented order, and the inputs of a
layout probe (one sequence fewer, one token shorter)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.calls import bind, probe_inputs, read_call  # noqa: E402
from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402


class Model(torch.nn.Module):
    def forward(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        inputs_embeds: Any = None,
        **kwargs: Any,
    ) -> None:
        return None


class Stack(torch.nn.Module):
    def forward(self, hidden: Any, *rest: Any, attention_mask: Any = None, **kw: Any) -> None:
        return None


def test_bind_by_name_positional_and_var_kwargs() -> None:
    ids = torch.zeros(2, 3, dtype=torch.long)
    named = bind(Model(), (ids,), {"foo": 1})
    assert named["input_ids"] is ids and named["foo"] == 1 and named["#first"] is ids
    named = bind(Stack(), (ids, "a", "b"), {})
    assert named["hidden"] is ids and named["#0"] == "a" and named["#1"] == "b"
    # arguments the signature refuses: kwargs kept, positionals numbered
    named = bind(Model(), (1, 2, 3, 4), {"input_ids": 5})
    assert (
        named["input_ids"] == 5 and named["#0"] == 1 and named["#3"] == 4 and named["#first"] == 1
    )


def test_read_call_model_mask_and_shape() -> None:
    ids = torch.zeros(2, 4, dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])
    call = read_call(Model(), (), {"input_ids": ids, "attention_mask": mask})
    assert call.bt == (2, 4) and call.ids is ids
    assert call.mask.dtype == torch.bool and torch.equal(call.mask, mask != 0)
    call = read_call(Model(), (ids,), {})
    assert call.bt == (2, 4) and call.mask is None
    emb = torch.zeros(3, 5, 8)
    call = read_call(Model(), (), {"inputs_embeds": emb})
    assert call.bt == (3, 5) and call.ids is None
    assert read_call(Model(), (), {}).bt is None
    with pytest.raises(
        CaptureError, match=r"attention_mask shape \(2, 3\) does not match the input \(2, 4\)"
    ):
        read_call(Model(), (ids,), {"attention_mask": torch.ones(2, 3)})


def test_read_call_stack_mask_order() -> None:
    h = torch.zeros(2, 3, 8)
    root_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    own_mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    root = {"attention_mask": root_mask, "decoder_attention_mask": own_mask}
    ids = torch.zeros(2, 3, dtype=torch.long)
    # 1. the root's mask for the stack (encoder: attention_mask; decoder: decoder_attention_mask)
    call = read_call(Stack(), (ids,), {}, role="encoder", root=root)
    assert call.bt == (2, 3) and torch.equal(call.mask, root_mask != 0)
    call = read_call(Stack(), (ids,), {}, role="decoder", root=root)
    assert torch.equal(call.mask, own_mask != 0)
    # 2. the stack's own attention_mask (no root mask of its shape)
    call = read_call(Stack(), (ids,), {"attention_mask": own_mask}, role="encoder", root={})
    assert torch.equal(call.mask, own_mask != 0)
    # 3. fairseq's *padding_mask: True on padding, inverted; the encoder's one skipped in a decoder
    pad = torch.tensor([[False, False, True], [False, True, True]])
    call = read_call(Stack(), (h,), {"decoder_padding_mask": pad}, role="decoder", root={})
    assert call.bt == (2, 3) and torch.equal(call.mask, ~pad)
    call = read_call(Stack(), (h,), {"encoder_padding_mask": pad}, role="decoder", root={})
    assert call.mask is None and call.bt is None
    # a mask of another shape than the stack's is not this stack's
    call = read_call(Stack(), (ids,), {"attention_mask": torch.ones(2, 5)}, role="encoder")
    assert call.bt == (2, 3) and call.mask is None


def test_probe_inputs_batch_and_length() -> None:
    ids = torch.arange(12).reshape(3, 4)
    mask = torch.ones(3, 4)
    pos = torch.arange(4)  # first axis is not B: untouched
    cut = probe_inputs(
        (ids,),
        {"attention_mask": mask, "pos": pos, "past_key_values": 1, "use_cache": True},
        (3, 4),
        "batch",
    )
    assert cut is not None
    args, kwargs = cut
    assert torch.equal(args[0], ids[:2]) and tuple(kwargs["attention_mask"].shape) == (2, 4)
    assert kwargs["pos"] is pos and "past_key_values" not in kwargs and kwargs["use_cache"] is False
    cut = probe_inputs((ids,), {"attention_mask": mask}, (3, 4), "length")
    assert cut is not None
    assert torch.equal(cut[0][0], ids[:, :3]) and tuple(cut[1]["attention_mask"].shape) == (3, 3)
    assert probe_inputs((ids[:1],), {}, (1, 4), "batch") is None
    assert probe_inputs((ids[:, :1],), {}, (3, 1), "length") is None
