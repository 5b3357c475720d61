"""reports/commands/probe.py: what a probe set holds, per category the rows and the q/eps
range numpy gives from the probes' own q, in the document and the text table."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.parity.probe_set import CATEGORIES, ProbeSet
from rmsnorm_eps.parity.probes import ProbeSummary, make_probes
from rmsnorm_eps.reports.commands.probe import ProbeReporter, probe_document
from rmsnorm_eps.reports.options import RenderOptions

EPS = 1e-6


@pytest.fixture(scope="module")
def probes() -> ProbeSet:
    return make_probes(8, EPS)


def test_document_categories_are_numpys(probes: ProbeSet) -> None:
    doc = ProbeReporter().document(ProbeSummary(probes, "out/p.npz"))
    assert doc == probe_document(probes, "out/p.npz")
    assert (doc["command"], doc["path"], doc["rows"], doc["dim"]) == ("probe", "out/p.npz", 32, 8)
    assert doc["eps"] == EPS and "tool" in doc  # the head's tool, not the metadata's
    q = np.mean(np.asarray(probes.inputs, np.float64) ** 2, axis=-1)
    assert q.shape == (probes.count,)
    cats = {c["name"]: c for c in doc["categories"]}
    present = [c for i, c in enumerate(CATEGORIES) if np.any(probes.category == i)]
    assert list(cats) == present  # in category order, absent ones left out
    assert sum(c["rows"] for c in cats.values()) == probes.count
    for name, cat in cats.items():
        rows = np.flatnonzero(probes.category == CATEGORIES.index(name))
        assert cat["rows"] == rows.size
        assert cat["min_ratio"] == pytest.approx(q[rows].min() / EPS, rel=1e-6), name
        assert cat["max_ratio"] == pytest.approx(q[rows].max() / EPS, rel=1e-6), name
    assert cats["zero"]["max_ratio"] == 0.0
    bound = doc["bound_ratio"]
    at = cats["at-bound"]
    assert at["min_ratio"] == pytest.approx(bound, rel=1e-6)


def test_text_head_and_one_row_per_category(probes: ProbeSet) -> None:
    summary = ProbeSummary(probes, None)
    out = ProbeReporter(RenderOptions()).text(summary)
    lines = out.splitlines()
    assert lines[0] == (
        "32 probes, d=8, dtype float32, eps 1e-06, gain ones (convention w), seed 0"
    )  # no path: no "-> PATH"
    doc = ProbeReporter().document(summary)
    for cat in doc["categories"]:
        row = next(line.split() for line in lines if line.split()[:1] == [cat["name"]])
        assert row[1:] == [str(cat["rows"]), f"{cat['min_ratio']:.4g}", f"{cat['max_ratio']:.4g}"]
    assert (
        ProbeReporter(RenderOptions())
        .text(ProbeSummary(probes, "o\n::x.npz"))
        .splitlines()[0]
        .endswith("-> o\\x0a\\x3a:x.npz")
    )


def test_layer_norm_probes_name_the_variance() -> None:
    probes = make_probes(8, EPS, norm="layer")
    out = ProbeReporter(RenderOptions()).text(ProbeSummary(probes, None))
    assert "LayerNorm (bias" in out.splitlines()[0]
    assert "min v/eps" in out and "min q/eps" not in out
