"""The capture on a matrix of transformers architectures, each built here from its own config class
(tiny, seeded random weights; no download), checked against an independent float64 hook.

The test's hook knows, from the transformers modeling files (the table ``EXPECT``, by class
name), what every norm class computes and in which layout each per-head norm receives its
input (``BHTD``: Gemma 3 applies q_norm/k_norm after the transpose); it records, per call, the
quantity the module divides by, in float64: mean(x^2) (RMSNorm), the biased variance
(LayerNorm), mean((x*silu(g))^2) or mean(x^2) per group (gated RMSNorm, gate before or after).
The capture must find exactly the expected modules, with the expected kind, gain and live eps,
and the same value for every (batch, position, head, call) within 1e-6 relative.

Inputs: a batch of three texts of mixed lengths padded to the number of attention heads
(T == H), then single texts (batch size 1) of mixed lengths, the first again of length H.

The resulting support table is in docs/capture.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.output import config_document  # noqa: E402

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[1] / "docs" / "capture.md"
HEADS = 4
BASE: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": HEADS,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
MAMBA = {
    "mamba_n_heads": 4,
    "mamba_d_head": 16,
    "mamba_n_groups": 1,
    "mamba_d_state": 8,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 8,
}


@dataclass(frozen=True)
class Family:
    """An architecture of the matrix: its model_type, config overrides, model family."""

    model_type: str
    extra: dict[str, Any] = field(default_factory=dict)
    family: str = "causal"
    drop: tuple[str, ...] = ()


FAMILIES = [
    Family("llama"),
    Family("mistral"),
    Family("qwen2"),
    Family("qwen3", {"rms_norm_eps": 1e-6}),
    Family(
        "qwen3_moe",
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
    ),
    Family("gemma"),
    Family("gemma2"),
    Family("gemma3_text", {"sliding_window": 8}),
    Family("phi3", {"num_key_value_heads": 4}),
    Family("olmo"),
    Family("olmo2"),
    Family("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    Family("granite"),
    Family("smollm3"),
    Family("cohere", {"use_qk_norm": True, "num_key_value_heads": 4}),
    Family("gpt_neox", {"rotary_pct": 0.5}),
    Family("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}, drop=("head_dim",)),
    Family("starcoder2"),
    Family(
        "llama4_text",
        {
            "intermediate_size_mlp": 64,
            "num_local_experts": 2,
            "use_qk_norm": True,
            "no_rope_layers": [1, 1],
            "attention_chunk_size": 16,
        },
    ),
    Family(
        "deepseek_v3",
        {
            "q_lora_rank": 16,
            "kv_lora_rank": 16,
            "qk_rope_head_dim": 4,
            "head_dim": 4,
            "num_key_value_heads": HEADS,
            "qk_nope_head_dim": 4,
            "v_head_dim": 8,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_group": 1,
            "topk_group": 1,
            "moe_intermediate_size": 16,
            "first_k_dense_replace": 1,
        },
    ),
    Family(
        "recurrent_gemma",
        {
            "lru_width": 32,
            "attention_window_size": 16,
            "block_types": ["recurrent", "attention"],
            "conv1d_width": 4,
        },
    ),
    Family(
        "gemma3n_text",
        {
            "hidden_size_per_layer_input": 8,
            "vocab_size_per_layer_input": 96,
            "laurel_rank": 4,
            "altup_num_inputs": 2,
            "num_kv_shared_layers": 0,
            "activation_sparsity_pattern": [0.0, 0.0],
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 8,
            "intermediate_size": [64, 64],
        },
    ),
    Family(
        "mamba2",
        {
            "num_heads": 4,
            "head_dim": 16,
            "state_size": 8,
            "n_groups": 2,
            "expand": 2,
            "chunk_size": 8,
            "conv_kernel": 4,
        },
    ),
    Family("bamba", {**MAMBA, "attn_layer_indices": [1]}),
    Family(
        "nemotron_h",
        {
            **MAMBA,
            "n_groups": 2,
            "mamba_num_heads": 4,
            "mamba_head_dim": 16,
            "ssm_state_size": 8,
            "hybrid_override_pattern": "M*",
            "layers_block_type": ["mamba", "attention"],
        },
    ),
    Family(
        "falcon_h1",
        {
            **MAMBA,
            "mamba_d_ssm": 64,
            "mamba_rms_norm": True,
            "mamba_norm_before_gate": False,
            "mamba_n_groups": 2,
        },
    ),
    Family(
        "qwen3_next",
        {
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 4,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16,
            "layer_types": ["linear_attention", "full_attention"],
        },
    ),
    Family("bert", {"layer_norm_eps": 1e-12}, family="encoder"),
    Family(
        "t5",
        {
            "d_model": 32,
            "d_kv": 8,
            "d_ff": 64,
            "num_heads": HEADS,
            "num_layers": 1,
            "num_decoder_layers": 1,
            "decoder_start_token_id": 0,
        },
        family="encoder-decoder",
    ),
]

# class name -> (norm, gain, gated: gate before normalizing?) as the modeling files compute it.
EXPECT: dict[str, tuple[str, str, bool | None]] = {
    "GemmaRMSNorm": ("rms", "1+w", None),
    "Gemma2RMSNorm": ("rms", "1+w", None),
    "Gemma3RMSNorm": ("rms", "1+w", None),
    "RecurrentGemmaRMSNorm": ("rms", "1+w", None),
    "Qwen3NextRMSNorm": ("rms", "1+w", None),
    "Llama4TextL2Norm": ("rms", "none", None),
    "OlmoLayerNorm": ("layer", "none", None),
    "CohereLayerNorm": ("layer", "w", None),
    "LayerNorm": ("layer", "w", None),
    "MambaRMSNormGated": ("gated-rms", "w", True),
    "BambaRMSNormGated": ("gated-rms", "w", True),
    "NemotronHRMSNormGated": ("gated-rms", "w", True),
    "FalconH1RMSNormGated": ("gated-rms", "w", None),  # before = not norm_before_gate
    "Qwen3NextRMSNormGated": ("gated-rms", "w", False),
}
HARD_CODED_EPS = {"OlmoLayerNorm": 1e-5}
#: per-head norms that receive [B, H, T, D] (applied after the transpose)
BHTD = {("gemma3_text", "q_norm"), ("gemma3_text", "k_norm")}


def expected_kind(module: Any) -> tuple[str, str, bool | None]:
    cls = type(module).__name__
    if cls == "Gemma3nRMSNorm":
        return ("rms", "w" if module.with_scale else "none", None)
    if cls == "FalconH1RMSNormGated":
        return ("gated-rms", "w", not module.norm_before_gate)
    if cls == "LayerNorm" and getattr(module, "weight", None) is None:
        return ("layer", "none", None)
    if cls in EXPECT:
        return EXPECT[cls]
    if cls.endswith(("RMSNorm", "T5LayerNorm")):
        return ("rms", "w", None)
    raise AssertionError(f"the test does not know norm class {cls}: add it to EXPECT")


def expected_eps(module: Any) -> float:
    for attr in ("eps", "variance_epsilon", "epsilon"):
        value = getattr(module, attr, None)
        if value is not None:
            return float(value)
    return HARD_CODED_EPS[type(module).__name__]


def build(fam: Family, dtype: Any = None) -> Any:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    kw = {k: v for k, v in {**BASE, **fam.extra}.items() if k not in fam.drop}
    cfg = AutoConfig.for_model(fam.model_type, **kw)
    torch.manual_seed(0)
    auto = {"causal": AutoModelForCausalLM, "encoder": AutoModel}.get(
        fam.family, AutoModelForSeq2SeqLM
    )
    model = auto.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():  # weights away from their 0/1 init, so that gains matter
        for name, p in model.named_parameters():
            if "norm" in name.lower() and p.ndim >= 1:
                p.add_(torch.rand(p.shape) * 0.5)
    return model.to(dtype or torch.float32).eval()


class Reference:
    """The test's own float64 hook: per module, {(batch, position, head, call): value}."""

    def __init__(self, model: Any, fam: Family) -> None:
        self.model, self.fam = model, fam
        self.mods = {
            n: m
            for n, m in model.named_modules()
            if n and next(iter(m.children()), None) is None and "Norm" in type(m).__name__
        }
        self.values: dict[str, dict[tuple[int, int, int, int], float]] = {n: {} for n in self.mods}
        self.masks: dict[str, Any] = {}
        self.offset = 0
        self.calls: dict[str, int] = {}

    def forward(self, ids: Any, mask: Any) -> None:
        self.calls = {}
        self.masks = {"encoder": mask, "decoder": mask}
        handles = [
            m.register_forward_pre_hook(self._hook(n), with_kwargs=True)
            for n, m in self.mods.items()
        ]
        try:
            with torch.no_grad():
                kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
                if self.fam.family == "encoder-decoder":
                    dec = torch.zeros_like(ids)
                    dec[:, 1:] = ids[:, :-1]
                    kw |= {"decoder_input_ids": dec, "decoder_attention_mask": mask}
                self.model(**kw)
        finally:
            for h in handles:
                h.remove()
        self.offset += int(ids.shape[0])

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else kwargs["hidden_states"]
            gate = args[1] if len(args) > 1 else kwargs.get("gate")
            call = self.calls.get(name, 0)
            self.calls[name] = call + 1
            self._store(name, module, x, gate, call)

        return hook

    def _store(self, name: str, module: Any, x: Any, gate: Any, call: int) -> None:
        norm, _, before = expected_kind(module)
        xd = x.detach().double()
        if norm == "gated-rms":
            group = getattr(module, "group_size", None)
            if group is None:
                group = xd.shape[-1] // getattr(module, "n_groups", 1)
            a = xd * torch.nn.functional.silu(gate.double()) if before else xd
            a = a.reshape(*a.shape[:-1], -1, group)
            q = (a * a).mean(-1)  # [..., groups]
        elif norm == "layer":
            q = xd.var(-1, unbiased=False)[..., None]
        else:
            q = (xd * xd).mean(-1)[..., None]
        mask = self.masks["decoder" if name.startswith("decoder.") else "encoder"]
        b, t = mask.shape
        short = name.rsplit(".", 1)[-1]
        if q.ndim == 4:  # [B, T, H, G] or [B, H, T, G]
            if (self.fam.model_type, short) in BHTD:
                q = q.transpose(1, 2)
            q = q.reshape(b, t, -1)
        elif q.ndim == 2:  # [B*T*H, G]
            q = q.reshape(b, t, -1)
        assert q.shape[:2] == (b, t), (name, tuple(q.shape))
        pos = torch.cumsum(mask.long(), 1) - 1
        for bi in range(b):
            for ti in range(t):
                if not mask[bi, ti]:
                    continue
                for h in range(q.shape[2]):
                    key = (self.offset + bi, int(pos[bi, ti]), h, call)
                    self.values[name][key] = float(q[bi, ti, h])


def batches() -> list[tuple[Any, Any]]:
    """A padded batch of mixed lengths with T == HEADS, then batch size 1 of mixed lengths."""
    gen = torch.Generator().manual_seed(7)
    lengths_batch = [HEADS, HEADS - 1, 2]
    ids = torch.randint(3, BASE["vocab_size"], (3, HEADS), generator=gen)
    mask = torch.tensor([[1] * n + [0] * (HEADS - n) for n in lengths_batch])
    ids = ids * mask
    out = [(ids, mask)]
    for n in (HEADS, 3, HEADS + 2):
        one = torch.randint(3, BASE["vocab_size"], (1, n), generator=gen)
        out.append((one, torch.ones(1, n, dtype=torch.long)))
    return out


def run_family(fam: Family, dtype: Any = None) -> tuple[Any, Reference]:
    try:
        model = build(fam, dtype)
    except Exception as exc:  # an architecture this transformers cannot build: reported
        pytest.skip(f"{fam.model_type} cannot be built here: {type(exc).__name__}: {exc}"[:300])
    ref = Reference(model, fam)
    data = batches()
    for ids, mask in data:
        ref.forward(ids, mask)
    with QCapture(model) as cap, torch.no_grad():
        for ids, mask in data:
            kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            if fam.family == "encoder-decoder":
                dec = torch.zeros_like(ids)
                dec[:, 1:] = ids[:, :-1]
                kw |= {"decoder_input_ids": dec, "decoder_attention_mask": mask}
            model(**kw)
    return cap.result(), ref


BF16 = ("gemma3_text", "olmo", "mamba2", "bert")


@pytest.mark.parametrize(
    ("fam", "dtype"),
    [(f, None) for f in FAMILIES] + [(f, torch.bfloat16) for f in FAMILIES if f.model_type in BF16],
    ids=[f.model_type for f in FAMILIES] + [f"{m}-bfloat16" for m in BF16],
)
def test_family_capture_matches_independent_float64_hook(fam: Family, dtype: Any) -> None:
    result, ref = run_family(fam, dtype)
    captured = {m.name: m for m in result.modules}
    ran_expected = {n for n, v in ref.values.items() if v}
    found = {n for n, m in captured.items() if m.count > 0}
    assert found == ran_expected, (sorted(found - ran_expected), sorted(ran_expected - found))
    assert result.sequences == 6
    for name in sorted(ran_expected):
        module, m = ref.mods[name], captured[name]
        norm, gain, before = expected_kind(module)
        assert (m.norm, m.gain) == (norm, gain), name
        if norm == "gated-rms":
            assert m.gate_before == before, name
        assert m.eps == pytest.approx(expected_eps(module), rel=1e-6), name
        assert m.q is not None and m.call is not None and m.head is not None
        assert m.batch is not None and m.position is not None
        got = {
            (int(b), int(p), int(h), int(c)): float(q)
            for b, p, h, c, q in zip(m.batch, m.position, m.head, m.call, m.q, strict=True)
        }
        want = ref.values[name]
        assert len(got) == m.count, f"{name}: repeated (batch, position, head, call)"
        assert got.keys() == want.keys(), name
        keys = sorted(want)
        a = np.array([got[k] for k in keys])
        e = np.array([want[k] for k in keys])
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=0, err_msg=name)
        assert m.max_calls == 1 + max(k[3] for k in keys)
    assert not [m.name for m in result.modules if m.norm == "unknown"]
    # the written config names every module's kind and gain exactly (defaults + overrides)
    doc = config_document(result, fam.model_type, "test")
    defaults = doc["defaults"]
    assert set(doc["layers"]) == ran_expected
    for name, entry in doc["layers"].items():
        m = captured[name]
        assert entry.get("norm", defaults["norm"]) == m.norm, name
        assert entry.get("gain", defaults["gain"]) == m.gain, name
        assert entry["eps"] == m.eps and entry["dim"] == m.dim, name
    # ... and the config reader (ratio --config, config show) reads it back unchanged
    _round_trip(result, fam.model_type, captured)
    if dtype is not None:
        assert "bfloat16" in {m.input_dtype for m in result.modules if m.count}
        return
    assert support_row(fam, result) in DOCS.read_text(encoding="utf-8").splitlines()


def _round_trip(result: Any, model_type: str, captured: dict[str, Any]) -> None:
    """``capture --config-out``'s YAML, read by the config reader every command uses: each
    captured layer resolves to the live eps, norm kind, gain and dim."""
    import tempfile
    from pathlib import Path

    from rmsnorm_eps.capture.output import write_config
    from rmsnorm_eps.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{model_type}.yaml"
        write_config(result, path, model_type, "test")
        config = load_config(path)
    for name, m in captured.items():
        if not m.count or m.norm == "unknown":
            continue
        got = config.settings_for(name)
        assert got is not None, f"{name}: not covered by the written config"
        assert got.eps.value == m.eps, name
        assert got.norm.value == m.norm and got.gain.value == m.gain, name
        assert got.dim.value == m.dim, name


def support_row(fam: Family, result: Any) -> str:
    """The family's row of docs/capture.md's support table: modules per kind (gain, calls)."""
    kinds: dict[str, int] = {}
    for m in result.modules:
        if m.count:
            calls = f", x{m.max_calls}" if m.max_calls > 1 else ""
            bias = "+b" if m.bias else ""
            label = f"{m.norm} ({m.gain}{bias}{calls})"
            kinds[label] = kinds.get(label, 0) + 1
    listed = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items()))
    return f"| {fam.model_type} | {listed} | exact |"


def test_docs_carry_the_support_table() -> None:
    """docs/capture.md lists every architecture of the matrix (rows checked per family below)."""
    text = DOCS.read_text(encoding="utf-8")
    for fam in FAMILIES:
        assert f"| {fam.model_type} | " in text, fam.model_type


if __name__ == "__main__":  # pragma: no cover - prints the docs table
    for fam in FAMILIES:
        print(support_row(fam, run_family(fam)[0]))
