"""Layouts from evidence and masks however the model receives them, on tiny random-weight models
built here (no download): sequence-first XLNet and FSMT ([T, B, D]), FSMT's decoder receiving
its masks positionally, LongT5's transient-global tokens ([B, T/block, D], on their own axis)
and Longformer padding its input to a multiple of its attention window.

Each capture is compared with the test's own float64 hook, which knows from the transformers
modeling files how every norm receives its input (``LAYOUT``), per (batch, position, head,
call), in two runs: a batch whose size equals its padded length and the head count
(B == T == H == 3), then single texts of mixed lengths (--batch-size 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "capture.md"
HEADS = 3
PAD = 1


@dataclass(frozen=True)
class Arch:
    """A tiny model: how to build it, its family, and how its norms receive their input
    (``layout``: 'tb' sequence-first, 'bt', 'padded' (the model pads to a window multiple);
    ``own``: module-name suffixes on their own axis)."""

    name: str
    build: Callable[[], Any]
    family: str
    layout: str
    own: tuple[str, ...] = ()


def _xlnet() -> Any:
    from transformers import XLNetConfig, XLNetLMHeadModel

    cfg = XLNetConfig(
        vocab_size=64, d_model=24, n_layer=1, n_head=HEADS, d_inner=32, pad_token_id=PAD
    )
    return XLNetLMHeadModel(cfg)


def _fsmt() -> Any:
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    cfg = FSMTConfig(
        langs=["en", "de"],
        src_vocab_size=64,
        tgt_vocab_size=64,
        d_model=24,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=PAD,
        decoder_start_token_id=2,
    )
    return FSMTForConditionalGeneration(cfg)


def _longt5() -> Any:
    from transformers import LongT5Config, LongT5ForConditionalGeneration

    cfg = LongT5Config(
        vocab_size=64,
        d_model=24,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=HEADS,
        encoder_attention_type="transient-global",
        local_radius=2,
        global_block_size=2,
        decoder_start_token_id=0,
        pad_token_id=PAD,
    )
    return LongT5ForConditionalGeneration(cfg)


def _longformer() -> Any:
    from transformers import LongformerConfig, LongformerModel

    cfg = LongformerConfig(
        vocab_size=64,
        hidden_size=24,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        intermediate_size=32,
        attention_window=4,
        max_position_embeddings=80,
        pad_token_id=PAD,
    )
    return LongformerModel(cfg)


ARCHS = [
    Arch("xlnet", _xlnet, "causal", "tb"),
    Arch("fsmt", _fsmt, "encoder-decoder", "tb"),
    Arch("longt5", _longt5, "encoder-decoder", "bt", own=("global_input_layer_norm",)),
    Arch("longformer", _longformer, "encoder", "padded"),
]


def _norms(model: Any) -> dict[str, Any]:
    return {
        n: m
        for n, m in model.named_modules()
        if n and next(iter(m.children()), None) is None and "Norm" in type(m).__name__
    }


def _kind(module: Any) -> str:
    return "layer" if isinstance(module, torch.nn.LayerNorm) else "rms"  # LongT5LayerNorm: rms


class Reference:
    """The test's own float64 hook: per module, {(batch, position, head, call): q}."""

    def __init__(self, model: Any, arch: Arch) -> None:
        self.model, self.arch = model, arch
        self.mods = _norms(model)
        self.values: dict[str, dict[tuple[int, int, int, int], float]] = {n: {} for n in self.mods}
        self.offset = 0
        self.mask: Any = None
        self.calls: dict[str, int] = {}

    def run(self, kw: dict[str, Any]) -> None:
        self.calls, self.mask = {}, kw["attention_mask"]
        hs = [m.register_forward_pre_hook(self._hook(n)) for n, m in self.mods.items()]
        try:
            with torch.no_grad():
                self.model(**kw)
        finally:
            for h in hs:
                h.remove()
        self.offset += int(self.mask.shape[0])

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            call = self.calls.get(name, 0)
            self.calls[name] = call + 1
            x = args[0].detach().double()
            q = x.var(-1, unbiased=False) if _kind(module) == "layer" else (x * x).mean(-1)
            self._store(name, q, call)

        return hook

    def _store(self, name: str, q: Any, call: int) -> None:
        mask = self.mask
        t = int(mask.shape[1])
        own = name.endswith(self.arch.own) if self.arch.own else False
        if self.arch.layout == "tb" and not own:
            q = q.transpose(0, 1)
        pos = torch.cumsum(mask.long(), 1) - 1
        for bi in range(q.shape[0]):
            for li in range(q.shape[1]):
                if own:
                    key = (self.offset + bi, li, 0, call)
                elif li >= t or not mask[bi, li]:  # padding (ours, or the model's own)
                    continue
                else:
                    key = (self.offset + bi, int(pos[bi, li]), 0, call)
                self.values[name][key] = float(q[bi, li])


def _inputs(arch: Arch) -> list[dict[str, Any]]:
    """B == T == H (lengths 3, 2, 2), then batch size 1 of lengths 3, 5, 2, right-padded."""
    gen = torch.Generator().manual_seed(11)
    runs = []
    for lengths in ([3, 2, 2], [3], [5], [2]):
        t = max(lengths)
        ids = torch.randint(3, 64, (len(lengths), t), generator=gen)
        mask = torch.tensor([[1] * n + [0] * (t - n) for n in lengths])
        ids = torch.where(mask.bool(), ids, torch.full_like(ids, PAD))
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if arch.family == "encoder-decoder":
            dec = torch.full_like(ids, PAD)
            dec[:, 0] = 2
            dec[:, 1:] = torch.where(mask[:, 1:].bool(), ids[:, :-1], dec[:, 1:])
            kw |= {"decoder_input_ids": dec, "decoder_attention_mask": mask}
        runs.append(kw)
    return runs


@pytest.fixture(scope="module", params=ARCHS, ids=[a.name for a in ARCHS])
def captured(request: pytest.FixtureRequest) -> tuple[Arch, Any, Reference]:
    arch: Arch = request.param
    torch.manual_seed(0)
    model = arch.build().eval()
    with torch.no_grad():  # weights away from their 0/1 init
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                p.add_(torch.rand(p.shape) * 0.5)
    ref = Reference(model, arch)
    runs = _inputs(arch)
    for kw in runs:
        ref.run(kw)
    with QCapture(model) as cap, torch.no_grad():
        for kw in runs:
            model(**kw)
    return arch, cap.result(), ref


def test_every_norm_matches_an_independent_float64_hook(
    captured: tuple[Arch, Any, Reference],
) -> None:
    arch, result, ref = captured
    got_mods = {m.name: m for m in result.modules}
    assert set(got_mods) == set(ref.mods)
    assert result.sequences == 6
    for name, module in ref.mods.items():
        m = got_mods[name]
        assert m.norm == _kind(module), (name, m.reason)
        assert m.eps == pytest.approx(
            float(getattr(module, "eps", None) or module.variance_epsilon)
        )
        assert m.q is not None and m.batch is not None and m.position is not None
        assert m.head is not None and m.call is not None
        got = {
            (int(b), int(p), int(h), int(c)): float(q)
            for b, p, h, c, q in zip(m.batch, m.position, m.head, m.call, m.q, strict=True)
        }
        want = ref.values[name]
        assert len(got) == m.count, name
        assert got.keys() == want.keys(), name
        keys = sorted(want)
        np.testing.assert_allclose(
            [got[k] for k in keys], [want[k] for k in keys], rtol=1e-5, atol=0, err_msg=name
        )
        own = arch.own and name.endswith(arch.own)
        expected = {"tb": "tokens [T, B, D]", "bt": "tokens [B, T, D]"}.get(
            arch.layout, "model-padded [B, T+pad, D]"
        )
        assert m.layout == ("own axis [B, L, D]" if own else expected), name
    assert support_row(arch, result) in DOCS.read_text(encoding="utf-8").splitlines()


def support_row(arch: Arch, result: Any) -> str:
    """The architecture's row in docs/capture.md's support table."""
    kinds: dict[str, int] = {}
    for m in result.modules:
        if m.count:
            label = f"{m.norm} ({m.gain}{'+b' if m.bias else ''})"
            kinds[label] = kinds.get(label, 0) + 1
    listed = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items()))
    layouts = sorted({str(m.layout) for m in result.modules if m.count})
    return f"| {arch.name} | {listed} | exact: {'; '.join(layouts)} |"


def test_fsmt_decoder_mask_passed_positionally_as_a_padding_mask() -> None:
    """No decoder_attention_mask at the root: FSMT makes ``decoder_padding_mask`` (True on pad
    ids) and passes it to its decoder positionally; its pad positions are excluded."""
    torch.manual_seed(0)
    model = _fsmt().eval()
    kw = _inputs(ARCHS[1])[0]
    dec_mask = kw.pop("decoder_attention_mask")
    with QCapture(model) as cap, torch.no_grad():
        model(**kw, use_cache=False)
    mods = {m.name: m for m in cap.result().modules}
    m = mods["model.decoder.layers.0.final_layer_norm"]
    assert m.count == int(dec_mask.sum()) == 7
    assert sorted(zip(m.batch.tolist(), m.position.tolist(), strict=True)) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
    ]


class _Positional(torch.nn.Module):
    """A model whose caller passes the mask positionally: model(ids, mask)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.norm = torch.nn.RMSNorm(8, eps=1e-6)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
        return self.norm(self.emb(input_ids))


def test_a_mask_passed_positionally_excludes_the_padding() -> None:
    model = _Positional()
    ids = torch.randint(0, 16, (2, 4))
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    with QCapture(model) as cap, torch.no_grad():
        model(ids, mask)
    m = cap.result().modules[0]
    assert m.count == 5 and m.position.tolist() == [0, 1, 2, 0, 1]
    x = model.emb(ids).detach().double()
    want = (x * x).mean(-1)[mask.bool()].numpy()
    np.testing.assert_allclose(m.q, want, rtol=1e-12)


class _FixedBatch(torch.nn.Module):
    """Sequence-first ([T, B, D]) and refusing any batch size but 3: on a B == T == 3 call the
    probe with one sequence fewer fails, so nothing tells [T, B] from [B, T]."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.flat = torch.nn.RMSNorm(8, eps=1e-6)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
        x = self.emb(input_ids)
        self.flat(x.reshape(-1, 8))  # [B*T, D]: the sizes tell
        if input_ids.shape[0] != 3:
            raise ValueError("this model runs batches of 3")
        return self.norm(x.transpose(0, 1).contiguous())  # [T, B, D]


def test_layout_without_evidence_is_listed_not_guessed() -> None:
    model = _FixedBatch()
    ids = torch.randint(0, 16, (3, 3))
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids)
    mods = {m.name: m for m in cap.result().modules}
    norm, flat = mods["norm"], mods["flat"]
    assert norm.norm == "unknown" and norm.count == 0 and norm.calls == 1
    assert "layout unknown" in str(norm.reason) and "[B, T] from [T, B]" in str(norm.reason)
    assert flat.layout == "tokens [B*T, D]" and flat.count == 9
    x = model.emb(ids).detach().double()
    np.testing.assert_allclose(flat.q, (x * x).mean(-1).reshape(-1).numpy(), rtol=1e-12)


def test_without_probes_an_ambiguous_layout_is_listed() -> None:
    """``probe=False`` never reruns the model: B == T on a first call is then not guessed."""
    torch.manual_seed(0)
    model = _xlnet().eval()
    ids = torch.randint(3, 64, (3, 3))
    with QCapture(model, probe=False) as cap, torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones(3, 3, dtype=torch.long))
        model(input_ids=ids[:2], attention_mask=torch.ones(2, 3, dtype=torch.long))
    for m in cap.result().modules:
        assert m.norm == "unknown" and m.count == 0 and "[B, T] from [T, B]" in str(m.reason)
