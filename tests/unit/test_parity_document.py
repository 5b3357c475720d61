"""parity/document.py: the acceptance record of a parity result, built here from outputs with
known faults (NaN, inf, elements pushed past the tolerance): its counts against numpy over the
same arrays, nonfinite numbers as JSON strings, the key order, the optional timestamp, the
reference named by the norm, and the parity JSON schema."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.parity.api import compare_outputs
from rmsnorm_eps.parity.document import NONFINITE_RULE, parity_document
from rmsnorm_eps.parity.probe_set import (
    CATEGORIES,
    LAYERNORM_REFERENCE_NAME,
    REFERENCE_NAME,
    ProbeSet,
)
from rmsnorm_eps.parity.probes import make_probes
from rmsnorm_eps.reports.schema import load_schema

ATOL, RTOL = 1e-6, 1e-5


def _faulty() -> tuple[ProbeSet, np.ndarray]:
    probes = make_probes(16, 1e-6, dtype="float64")
    out = probes.reference.copy()
    out[3, 2] = np.nan
    out[5, 0] = np.inf
    out[7, :4] += 1e-3  # far past atol + rtol * |e|
    return probes, out


def test_the_counts_are_those_of_the_arrays() -> None:
    probes, out = _faulty()
    result = compare_outputs(probes, out, output_dtype="float64", atol=ATOL, rtol=RTOL)
    doc = parity_document(result)
    ref = probes.reference
    finite = np.isfinite(out)
    bad = ~finite | (np.abs(out - ref) > ATOL + RTOL * np.abs(ref))
    assert doc["summary"]["failing_elements"] == int(bad.sum()) == 6
    assert doc["summary"]["nonfinite"] == int((~finite).sum()) == 2
    assert doc["summary"]["categories"] == len(CATEGORIES) == len(doc["categories"])
    cats = np.asarray(probes.category)
    failing = sorted({CATEGORIES[c] for c in cats[np.flatnonzero(bad.any(axis=1))]})
    assert sorted(doc["summary"]["failing_categories"]) == failing
    for i, c in enumerate(doc["categories"]):
        rows = cats == i
        assert c["name"] == CATEGORIES[i] and c["rows"] == int(rows.sum())
        assert c["elements"] == int(rows.sum()) * 16
        assert c["failing"] == int(bad[rows].sum()) and c["passed"] is (c["failing"] == 0)
        assert c["nan"] == int(np.isnan(out[rows]).sum())
        assert c["failing_rows"] == int(bad[rows].any(axis=1).sum())
    assert doc["verdict"] == "fail"
    assert doc["error_rule"]["atol"] == ATOL and doc["error_rule"]["rtol"] == RTOL
    assert doc["error_rule"]["nonfinite"] == NONFINITE_RULE


def test_it_is_strict_json_valid_under_the_schema_and_in_a_fixed_order() -> None:
    probes, out = _faulty()
    doc = parity_document(compare_outputs(probes, out, output_dtype="float64"))
    text = json.dumps(doc, allow_nan=False)  # NaN/inf as strings, never bare
    jsonschema.Draft202012Validator(load_schema("parity")).validate(json.loads(text))
    assert list(doc)[:5] == ["schema_version", "tool", "version", "command", "verdict"]
    assert list(doc)[-2:] == ["categories", "summary"] and "generated_at" not in doc
    assert doc["command"] == "parity"
    again = parity_document(compare_outputs(probes, out, output_dtype="float64"))
    assert json.dumps(again, allow_nan=False) == text  # deterministic without a timestamp
    stamped = parity_document(compare_outputs(probes, out, output_dtype="float64"), "2026-01-02")
    assert stamped["generated_at"] == "2026-01-02" and list(stamped)[4] == "generated_at"


def test_a_passing_result_and_its_inference() -> None:
    probes = make_probes(16, 1e-6, dtype="float64")
    result = compare_outputs(probes, probes.reference.copy(), output_dtype="float64")
    doc = parity_document(result)
    assert doc["verdict"] == "pass" and doc["summary"]["failing_categories"] == []
    assert doc["reference"] == REFERENCE_NAME and doc["norm"] == "rms"
    assert doc["configured_eps"] == 1e-6 and doc["dimension"] == 16
    inf = result.inference
    assert doc["inferred_eps"] == inf.eps == doc["inference"]["eps"]
    assert doc["inferred_eps_interval"] == [inf.eps_low, inf.eps_high]
    assert doc["inferred_eps"] == pytest.approx(1e-6, rel=1e-3)
    assert doc["probes"]["rows"] == probes.count and doc["probes"]["seed"] == probes.seed
    assert len(doc["inference"]["fits"]) == len(inf.fits)


def test_a_layernorm_names_its_own_reference() -> None:
    probes = make_probes(16, 1e-5, dtype="float64", norm="layer")
    doc = parity_document(compare_outputs(probes, probes.reference.copy(), output_dtype="float64"))
    assert doc["norm"] == "layer" and doc["reference"] == LAYERNORM_REFERENCE_NAME
    assert LAYERNORM_REFERENCE_NAME != REFERENCE_NAME
