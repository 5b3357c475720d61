"""Capture on families that once failed or answered about something else, each built here from
its own config class (tiny, seeded random weights; no download), checked against the test's own
float64 hook on the module that normalizes.

Each test names the cause it guards: a wrapper norm that is no leaf (I-BERT), class names
resolved through transformers' auto mappings, a per-layer ``intermediate_size`` list, grouped
and (1 + w)-before-normalize RMSNorms, and layouts read from evidence (relative-position
LayerNorms, internal padding, prompt vectors, window padding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402

pytestmark = pytest.mark.slow

BASE: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def build(model_type: str, auto: Any, **extra: Any) -> Any:
    """A tiny model of ``model_type`` from its config class, eager attention, float32."""
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(model_type, **{**BASE, **extra})
    torch.manual_seed(0)
    model = auto.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():  # gains away from their 0/1 init, so that the gain convention shows
        for name, p in model.named_parameters():
            if "norm" in name.lower() and p.ndim >= 1:
                p.add_(torch.rand(p.shape) * 0.5)
    return model.float().eval()


def padded_batch(lengths: tuple[int, ...] = (4, 3, 2), seed: int = 7) -> tuple[Any, Any]:
    t = max(lengths)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, BASE["vocab_size"], (len(lengths), t), generator=gen)
    mask = torch.tensor([[1] * n + [0] * (t - n) for n in lengths])
    return ids * mask, mask


def inputs_of(model: Any, name: str, run: Callable[[], None]) -> list[Any]:
    """The first tensor argument of every call of module ``name`` during ``run()`` (float64)."""
    seen: list[Any] = []
    module = dict(model.named_modules())[name]

    def hook(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen.append((args[0] if args else kwargs["hidden_states"]).detach().double())

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    return seen


def real_tokens(q_bt: Any, mask: Any) -> np.ndarray:
    """q of shape [B, T] at the real tokens, in (batch, position) order."""
    return q_bt[mask.bool()].numpy()


def test_ibert_int_layer_norm_is_found_though_it_holds_a_quant_child() -> None:
    """IntLayerNorm keeps a QuantAct child (it is no leaf): it is still the module that
    normalizes, with the biased variance over the hidden axis and eps 1e-12."""
    from transformers import AutoModel

    model = build("ibert", AutoModel, layer_norm_eps=1e-12)
    ids, mask = padded_batch()
    name = "encoder.layer.0.output.LayerNorm"
    with QCapture(model) as cap:
        seen = inputs_of(model, name, lambda: model(input_ids=ids, attention_mask=mask))
    mods = {m.name: m for m in cap.result().modules}
    assert {m.class_name for m in mods.values()} == {"IntLayerNorm"}
    assert len(mods) == 1 + 2 * 2  # embeddings + two per layer
    m = mods[name]
    assert (m.norm, m.gain, m.bias, m.eps) == ("layer", "w", True, 1e-12)
    want = real_tokens(seen[0].var(-1, unbiased=False), mask)
    assert m.q is not None and m.count == int(mask.sum()) == want.size
    np.testing.assert_allclose(m.q, want, rtol=1e-12)


def test_a_norm_named_wrapper_that_holds_a_norm_is_not_hooked_twice() -> None:
    """A *Norm* class with an eps attribute that holds a LayerNorm: only the inner one."""

    class PreNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.eps = 1e-5
            self.norm = torch.nn.LayerNorm(8, eps=1e-5)

        def forward(self, x: Any) -> Any:
            return self.norm(x)

    from rmsnorm_eps.capture.modules import find_norm_modules

    model = torch.nn.Sequential(PreNorm())
    assert [s.name for s in find_norm_modules(model)] == ["0.norm"]


QWEN4_EXP = {
    "layer_types": ["linear_attention", "indexed_attention"],
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "hc_count": 2,
    "hc_lowrank": 4,
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 8,
    "indexer_budget": 4,
    "indexer_compress_ratio": 2,
    "ngram_vocab_size_base": 256,
    "split_ngram_parts": 4,
    "make_ngram_vocab_size_divisible_by": 8,
}


def test_qwen4_exp_grouped_rms_norm_matches_per_group() -> None:
    """Qwen4-Exp's hyper-connection hc_norm normalizes its hc_count * hidden_size input in
    groups of hidden_size with gain 1 + w: one q per group, mean(x**2) over the group."""
    from transformers import AutoModelForCausalLM

    model = build("qwen4_exp_text", AutoModelForCausalLM, **QWEN4_EXP)
    ids, mask = padded_batch()
    name = "model.layers.0.attn_hyper_connection.hc_norm"
    with QCapture(model) as cap:
        seen = inputs_of(model, name, lambda: model(input_ids=ids, attention_mask=mask))
    mods = {m.name: m for m in cap.result().modules}
    hc = [m for n, m in mods.items() if n.endswith("hc_norm")]
    assert len(hc) == 5 and all(m.norm == "rms" and m.count for m in hc)
    m = mods[name]
    assert (m.gain, m.group_size, m.dim, m.eps) == ("1+w", 32, 32, 1e-6)
    x = seen[0].reshape(*seen[0].shape[:-1], 2, 32)  # [B, T, groups, hidden]
    want = (x * x).mean(-1)[mask.bool()].reshape(-1).numpy()
    assert m.q is not None and m.head is not None and m.heads == 2
    np.testing.assert_allclose(m.q, want, rtol=1e-12)
    assert list(m.head[:4]) == [0, 1, 0, 1]


def test_muse_spark_input_scaled_norm_q_is_of_the_scaled_input_as_rounded() -> None:
    """MuseSpark's InputScaledRMSNorm scales by (1 + w) BEFORE normalizing and rounds the scaled
    input to the input's dtype (bfloat16 here) first: q = mean(bf16((1 + w) * x)**2)."""
    from transformers import AutoModel

    model = build(
        "muse_spark_text",
        AutoModel,
        moe_intermediate_size=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_hidden_size=32,
        sliding_window=8,
    ).to(torch.bfloat16)
    ids, mask = padded_batch()
    name = "layers.0.post_feedforward_layernorm"
    module = dict(model.named_modules())[name]
    with QCapture(model) as cap, torch.no_grad():
        seen = inputs_of(model, name, lambda: model(input_ids=ids, attention_mask=mask))
    m = {r.name: r for r in cap.result().modules}[name]
    assert (m.norm, m.gain, m.input_scale, m.eps) == ("rms", "none", "1+w", 1e-8)
    x = seen[0].to(torch.bfloat16)
    a = (x.float() * (1.0 + module.weight.detach()).float()).to(torch.bfloat16).double()
    want = (a * a).mean(-1)[mask.bool()].numpy()
    unscaled = (x.double() ** 2).mean(-1)[mask.bool()].numpy()
    assert m.q is not None and not np.allclose(want, unscaled, rtol=0.1)
    np.testing.assert_allclose(m.q, want, rtol=1e-12)


def test_deberta_v2_relative_position_layer_norm_is_not_read_as_tokens() -> None:
    """DeBERTa-v2 normalizes its relative-position embeddings (2 * position_buckets = 16 rows)
    with encoder.LayerNorm; with batch 4 x length 4 the row count equals B * T, yet the rows
    are weights: listed with that reason, never analysed; the token norms are exact."""
    from transformers import AutoModel

    model = build(
        "deberta-v2",
        AutoModel,
        relative_attention=True,
        position_buckets=8,
        norm_rel_ebd="layer_norm",
        pos_att_type=["p2c", "c2p"],
        layer_norm_eps=1e-7,
    )
    ids, mask = padded_batch((4, 3, 2, 4))
    with QCapture(model) as cap:
        seen = inputs_of(
            model,
            "encoder.layer.0.output.LayerNorm",
            lambda: model(input_ids=ids, attention_mask=mask),
        )
    mods = {m.name: m for m in cap.result().modules}
    rel = mods["encoder.LayerNorm"]
    assert (rel.norm, rel.count, rel.layout) == ("unknown", 0, None)
    assert rel.reason is not None and "a weight of the model" in rel.reason
    token = mods["encoder.layer.0.output.LayerNorm"]
    assert (token.norm, token.layout, token.count) == ("layer", "tokens [B, T, D]", 13)
    want = real_tokens(seen[0].var(-1, unbiased=False), mask)
    np.testing.assert_allclose(token.q, want, rtol=1e-12)


def seq2seq_kwargs(ids: Any, mask: Any) -> dict[str, Any]:
    dec = torch.zeros_like(ids)
    dec[:, 1:] = ids[:, :-1]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "decoder_input_ids": dec,
        "decoder_attention_mask": mask,
    }


SMALL_S2S = {
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "decoder_start_token_id": 0,
}


@pytest.mark.parametrize(
    ("model_type", "extra", "names"),
    [
        (
            "pegasus_x",
            {"num_global_tokens": 2, "block_size": 4, "stagger_local_blocks": True},
            (
                "model.encoder.layers.0.self_attn_layer_norm",
                "model.encoder.layers.0.final_layer_norm",
            ),
        ),
        (
            "led",
            {
                "attention_window": [4],
                "max_encoder_position_embeddings": 64,
                "max_decoder_position_embeddings": 64,
            },
            ("led.encoder.layernorm_embedding", "led.encoder.layers.0.self_attn_layer_norm"),
        ),
    ],
)
def test_internal_padding_is_excluded_by_the_mask_the_model_uses(
    model_type: str, extra: dict[str, Any], names: tuple[str, ...]
) -> None:
    """PEGASUS-X pads its encoder input to a multiple of block_size, LED to a multiple of its
    attention window (its padding embedded in a second embedding call, normalized before any
    layer runs): length 6 becomes 8. Only the call's real tokens are kept, at their ranks."""
    from transformers import AutoModelForSeq2SeqLM

    model = build(
        model_type, AutoModelForSeq2SeqLM, **{**SMALL_S2S, "num_hidden_layers": 1, **extra}
    )
    ids, mask = padded_batch((6, 5, 3))
    kw = seq2seq_kwargs(ids, mask)
    with QCapture(model) as cap:
        outer: list[Any] = []
        seen = {
            names[0]: inputs_of(
                model,
                names[0],
                lambda: outer.extend(inputs_of(model, names[1], lambda: model(**kw))),
            )
        }
        seen[names[1]] = outer
    mods = {m.name: m for m in cap.result().modules}
    for name in names:
        m, x = mods[name], seen[name][0]
        assert tuple(x.shape[:2]) == (3, 8), name  # the model's padded length
        assert m.layout == "model-padded [B, T+pad, D]", name
        assert m.call is not None and int((m.call == 0).sum()) == 14, name
        want = x[:, :6].var(-1, unbiased=False)[mask.bool()].numpy()
        assert m.q is not None and m.position is not None
        np.testing.assert_allclose(m.q[m.call == 0], want, rtol=1e-12, err_msg=name)
        assert list(m.position[:6]) == [0, 1, 2, 3, 4, 5]


def test_cpmant_prompt_vectors_are_no_tokens() -> None:
    """CPM-Ant puts prompt_length prompt vectors before the ids: they are not captured, and
    the first real token is position 0."""
    from transformers import AutoModelForCausalLM

    model = build(
        "cpmant",
        AutoModelForCausalLM,
        dim_model=32,
        num_heads=4,
        dim_head=8,
        dim_ff=64,
        num_layers=1,
        prompt_types=3,
        prompt_length=3,
        segment_types=4,
    )
    ids, mask = padded_batch((4, 3, 2))
    name = "cpmant.encoder.output_layernorm"
    with QCapture(model) as cap:
        seen = inputs_of(model, name, lambda: model(input_ids=ids, attention_mask=mask))
    m = {r.name: r for r in cap.result().modules}[name]
    x = seen[0]
    assert tuple(x.shape[:2]) == (3, 3 + 4)
    assert m.layout == "prompted [B, P+T, D]" and m.count == 9
    want = (x[:, 3:] ** 2).mean(-1)[mask.bool()].numpy()
    np.testing.assert_allclose(m.q, want, rtol=1e-12)
    assert m.position is not None and list(m.position[:4]) == [0, 1, 2, 3]


def test_longt5_text_shorter_than_one_global_block() -> None:
    """LongT5 (transient-global) on texts shorter than global_block_size has no global block:
    its global_input_layer_norm sees [B, 0, D]; nothing is recorded there, no internal error."""
    from transformers import AutoModelForSeq2SeqLM

    model = build(
        "longt5",
        AutoModelForSeq2SeqLM,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_heads=4,
        num_layers=1,
        num_decoder_layers=1,
        decoder_start_token_id=0,
        encoder_attention_type="transient-global",
        local_radius=2,
        global_block_size=8,
    )
    ids, mask = padded_batch((4, 3, 2))
    with QCapture(model) as cap:
        model(**seq2seq_kwargs(ids, mask))
    mods = {m.name: m for m in cap.result().modules}
    glob = mods["encoder.block.0.layer.0.TransientGlobalSelfAttention.global_input_layer_norm"]
    assert (glob.norm, glob.count, glob.calls) == ("rms", 0, 1)
    assert mods["encoder.final_layer_norm"].count == 9
    assert not [m.name for m in mods.values() if m.norm == "unknown"]


def test_xlstm_multi_head_layer_norm_is_probed_with_its_head_axes() -> None:
    """xLSTM's multi-head LayerNorm takes [B, T, NH, DH] with one flat weight of NH * DH and
    returns [B, T, NH * DH]: the probe keeps both axes, and q is the variance per head."""
    from transformers import xLSTMConfig, xLSTMForCausalLM

    cfg = xLSTMConfig(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=1,
        num_heads=4,
        chunk_size=4,
        ffn_round_up_to_multiple_of=16,
        pad_token_id=0,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = xLSTMForCausalLM(cfg).eval()
    ids, mask = padded_batch()
    name = "backbone.blocks.0.mlstm_layer.multihead_norm"
    with QCapture(model) as cap:
        seen = inputs_of(model, name, lambda: model(input_ids=ids, attention_mask=mask))
    m = {r.name: r for r in cap.result().modules}[name]
    x = seen[0]
    assert tuple(x.shape) == (3, 4, 4, 8)
    assert (m.norm, m.group_size, m.heads, m.eps) == ("layer", 8, 4, 1e-6)
    want = x.var(-1, unbiased=False)[mask.bool()].reshape(-1).numpy()
    np.testing.assert_allclose(m.q, want, rtol=1e-12)


def test_learned_queries_expanded_over_the_batch_are_on_their_own_axis() -> None:
    """A norm of a learned [L, D] parameter expanded to [B, L, D] (a Q-Former's query tokens):
    with L == T the sizes read as tokens, but its rows are weights: its own axis, every row
    kept, position = the row index."""

    class Queries(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(16, 8)
            self.queries = torch.nn.Parameter(torch.randn(4, 8))
            self.norm = torch.nn.LayerNorm(8, eps=1e-6)
            self.token_norm = torch.nn.LayerNorm(8, eps=1e-6)

        def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
            x = self.token_norm(self.embed(input_ids))
            return x.mean() + self.norm(self.queries.expand(input_ids.shape[0], -1, -1)).mean()

    torch.manual_seed(0)
    model = Queries().eval()
    ids, mask = padded_batch((4, 3, 2))  # B = 3, T = 4 = L
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids % 16, attention_mask=mask)
    mods = {m.name: m for m in cap.result().modules}
    m = mods["norm"]
    assert (m.layout, m.count) == ("own axis [B, L, D]", 12)
    assert m.position is not None and list(m.position[:4]) == [0, 1, 2, 3]
    want = model.queries.detach().double().var(-1, unbiased=False).repeat(3).numpy()
    np.testing.assert_allclose(m.q, want, rtol=1e-12)
    assert (mods["token_norm"].layout, mods["token_norm"].count) == ("tokens [B, T, D]", 9)
