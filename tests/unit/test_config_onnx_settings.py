"""onnx_graph, settings part: the NormConfig overrides of one graph norm (eps with its stored
dtype, shortest decimal and where it lives; placement, gain, norm, reduction dtype, d) and the
findings over all norms (eps absent or a schema default, one eps unlike its siblings')."""

from __future__ import annotations

import dataclasses

import numpy as np

from rmsnorm_eps.config.onnx_graph import GraphNorm, _settings, _sibling_notes

PATH = "model.onnx"


def _norm(**over: object) -> GraphNorm:
    base = GraphNorm(
        name="model.layers.0.input_layernorm",
        norm="rms",
        op="fused RMSNormalization",
        eps=float(np.float32(1e-6)),
        eps_dtype="float32",
        eps_where="attribute epsilon of 'n'",
        eps_default=False,
        placement="inside",
        gain="w",
        gain_where="scale 'w'",
        dim=8,
        nodes=("n",),
        graph="graph",
        name_from="scale initializer name",
        add_dtype="float32",
        add_dtype_from="attribute stash_type 1",
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def test_a_float32_eps_keeps_its_value_and_gets_its_shortest_decimal() -> None:
    s = dict(_settings(_norm(), PATH))
    assert list(s) == ["eps", "placement", "gain", "norm", "reduction_dtype", "dim"]
    eps = s["eps"]
    assert eps.value == float(np.float32(1e-6)) and eps.stored == "float32" and eps.short == "1e-06"
    assert eps.provenance.kind == "file" and eps.provenance.source == PATH
    assert eps.provenance.key == "graph: fused RMSNormalization: attribute epsilon of 'n'"
    assert eps.provenance.note == ""
    assert (s["placement"].value, s["gain"].value, s["norm"].value) == ("inside", "w", "rms")
    assert s["gain"].provenance.note == "scale 'w'"
    assert s["norm"].provenance.note == "name from scale initializer name"
    assert s["reduction_dtype"].value == "float32"
    assert s["reduction_dtype"].provenance.note == "attribute stash_type 1"
    assert s["dim"].value == 8 and s["dim"].provenance.note == "length of the scale"


def test_a_float16_eps_is_rounded_and_says_so() -> None:
    v = float(np.float16(1e-6))
    eps = dict(_settings(_norm(eps=v, eps_dtype="float16"), PATH))["eps"]
    assert eps.value == v and eps.stored == "float16" and eps.short == str(np.float16(v))
    assert eps.provenance.note == "eps rounded to float16"


def test_a_float64_eps_has_no_storage_note() -> None:
    eps = dict(_settings(_norm(eps=1e-6, eps_dtype="float64"), PATH))["eps"]
    assert (eps.value, eps.stored, eps.short, eps.provenance.note) == (1e-6, None, None, "")


def test_an_eps_rounded_through_float16_names_float16() -> None:
    v = float(np.float16(1e-6))
    where = "behind a Cast to float32 of behind a Cast to float16 of initializer 'e'"
    eps = dict(_settings(_norm(eps=v, eps_dtype="float32", eps_where=where), PATH))["eps"]
    assert eps.value == v
    assert eps.provenance.note == "eps rounded to float16"


def test_a_schema_default_is_a_framework_value_and_no_eps_is_missing() -> None:
    default = _norm(eps=1e-5, eps_default=True, eps_where="no epsilon attribute: schema default")
    eps = dict(_settings(default, PATH))["eps"]
    assert eps.value == 1e-5 and eps.provenance.kind == "framework"
    assert eps.provenance.source == "no epsilon attribute: schema default"
    assert eps.provenance.note == "graph: fused RMSNormalization"
    none = dict(_settings(_norm(eps=None, eps_dtype=None, eps_where="eps dropped"), PATH))
    assert none["eps"].is_missing and none["eps"].provenance.kind == "missing"
    assert none["eps"].provenance.note == "eps dropped (graph: fused RMSNormalization)"


def test_no_reduction_dtype_or_dim_when_unknown() -> None:
    keys = [k for k, _ in _settings(_norm(add_dtype=None, dim=None), PATH)]
    assert keys == ["eps", "placement", "gain", "norm"]
    assert "reduction_dtype" not in dict(_settings(_norm(add_dtype="int64"), PATH))


def test_findings_name_the_norm_without_eps_and_the_one_unlike_its_siblings() -> None:
    a, b, c = (_norm(name=f"layers.{i}.norm") for i in range(3))
    odd = _norm(name="layers.3.norm", eps=1e-5)
    layer = _norm(name="ln", norm="layer", eps=1e-12)  # another kind: not a sibling
    dropped = _norm(name="layers.4.norm", eps=None, eps_where="eps dropped: no eps")
    notes = _sibling_notes((a, b, c, odd, layer, dropped))
    e6 = float(np.float32(1e-6))
    assert notes == [
        "FINDING layers.4.norm: eps dropped: no eps",
        f"FINDING layers.3.norm: eps 1e-05 unlike its 3 rms sibling(s) with eps {e6!r}",
    ]
    assert _sibling_notes((a, b, layer)) == []
    long = _norm(name="n" * 500, eps=None)
    (note,) = _sibling_notes((long,))
    assert len(note) < 200 and "characters)..." in note
