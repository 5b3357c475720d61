"""rmsnorm_eps.config.hf_families: every family row is well formed and names the transformers
file it was read from; the RMSNorm rows use the kinds the config model knows."""

from __future__ import annotations

from rmsnorm_eps.config.hf_families import HF_FAMILIES, TRANSFORMERS, layer_family, rms_family
from rmsnorm_eps.config.model import GAINS, NORMS


def test_rows_are_well_formed() -> None:
    assert "llama" in HF_FAMILIES and HF_FAMILIES["llama"].impl == "LlamaRMSNorm"
    for model_type, fam in HF_FAMILIES.items():
        assert fam.norm in NORMS, model_type
        assert fam.gain is None or fam.gain in GAINS, model_type
        if "remote code" in fam.impl:  # not in transformers: no modeling file to cite
            assert fam.source == "", model_type
        else:
            assert fam.source.startswith("transformers") and "modeling_" in fam.source, model_type
        assert fam.class_eps is None or 0 < fam.class_eps < 1, model_type
    assert TRANSFORMERS.startswith("transformers")


def test_constructors() -> None:
    f = rms_family("FooRMSNorm", 1e-6)
    assert (f.norm, f.impl, f.class_eps) == ("rms", "FooRMSNorm", 1e-6)
    g = layer_family("nn.LayerNorm", "torch")
    assert g.norm == "layer"
