"""Reports of many layers are written in bounded memory, chunk by chunk, with the same bytes.

ratio, compare and merge make their per-layer document entries and checks on demand
(:class:`~rmsnorm_eps.reports.lazy.Lazy`), and json, markdown, github, junit and sarif write
them one at a time (``render_chunks``). Here: (a) the chunks are whole lines and join to the
text the whole-document writers gave (``json.dumps``; ElementTree's indented tree for JUnit;
the line lists of Markdown and GitHub, kept below as independent oracles), on the shipped
examples, hostile names, token positions, ``--config`` provenance, shards and skipped layers;
(b) rendering a report of 10,000 layers holds a bounded amount of memory, far below the output
(the whole-document writers held 18 to 115 MiB at that size); (c) JUnit and SARIF stay valid.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import RatioReport, analyze_dump, evaluate_gate
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.escape import json_text, no_ci_command, xml
from rmsnorm_eps.merge import merge_summaries
from rmsnorm_eps.reports import RenderOptions, render, render_chunks
from rmsnorm_eps.reports.checks import Check, CheckReport, Rule, check_report
from rmsnorm_eps.reports.document import document
from rmsnorm_eps.reports.formats import github, junit, markdown, sarif
from rmsnorm_eps.reports.lazy import Lazy
from tests.test_untrusted_names import NAMES

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))
STREAMED = ("json", "markdown", "github", "junit", "sarif")
CHECK_FORMATS = ("markdown", "github", "junit", "sarif")


# ----------------------------------------------------------------------------- oracles
# The whole-document writers as they were before streaming: independent of the chunked code.
def _junit_whole(report: CheckReport) -> str:
    checks = list(report.checks)
    failures = sum(1 for c in checks if c.level == "error" and not c.passed)
    counts = {
        "tests": str(max(1, len(checks))),
        "failures": str(failures),
        "errors": "0",
        "skipped": "0",
    }
    root = ET.Element("testsuites", {"name": "rmsnorm-eps", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": f"rmsnorm-eps {report.command}", **counts})
    props = ET.SubElement(suite, "properties")
    if report.source is not None:
        ET.SubElement(props, "property", {"name": "source", "value": xml(report.source)})
    verdict = ("PASS: " if report.passed else "FAIL: ") + report.verdict
    ET.SubElement(props, "property", {"name": "verdict", "value": xml(verdict)})
    for chk in checks:
        attrs = {"classname": f"rmsnorm_eps.{chk.rule.replace('/', '.')}", "name": xml(chk.name)}
        source = report.source_of(chk)
        if source is not None:
            attrs["file"] = xml(source)
        case = ET.SubElement(suite, "testcase", attrs)
        if chk.passed:
            continue
        if chk.level == "error":
            fail = ET.SubElement(case, "failure", {"type": chk.rule, "message": xml(chk.message)})
            fail.text = junit.numbers_text(chk.numbers)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{chk.level}: {xml(chk.message)}\n{junit.numbers_text(chk.numbers)}"
    if not checks:
        attrs = {"classname": f"rmsnorm_eps.{report.command}", "name": xml(report.verdict)}
        ET.SubElement(suite, "testcase", attrs)
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return no_ci_command('<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n")


def _markdown_whole(report: CheckReport) -> str:
    cell, code = markdown.cell, markdown.code
    checks = list(report.checks)
    lines = [f"### {'PASS' if report.passed else 'FAIL'}: {cell(report.title)}", ""]
    if report.facts:
        lines += ["| | |", "|---|---|", *(f"| {cell(k)} | {cell(v)} |" for k, v in report.facts)]
        lines.append("")
    failed = [c for c in checks if not c.passed]
    ok = [c for c in checks if c.passed]
    if checks:
        errors = sum(c.level == "error" for c in checks)
        warnings = sum(c.level == "warning" for c in checks)
        lines.append(
            f"{len(checks)} check(s): {len(ok)} passed, {len(failed)} failed "
            f"({errors} error(s), {warnings} warning(s))."
        )
        lines.append("")
    if failed:
        lines += [f"| level | {report.subject} | check | details |", "|---|---|---|---|"]
        lines += [
            f"| {c.level} | {code(c.name)} | {cell(report.rule(c.rule).name)} | {cell(c.message)} |"
            for c in failed
        ]
        lines.append("")
    if ok:
        lines += ["<details>", f"<summary>{len(ok)} passing check(s)</summary>", ""]
        lines += [f"| {report.subject} | check | details |", "|---|---|---|"]
        lines += [
            f"| {code(c.name)} | {cell(report.rule(c.rule).name)} | {cell(c.message)} |" for c in ok
        ]
        lines += ["", "</details>", ""]
    if report.rules:
        lines += ["Rules:", ""]
        lines += [
            f"- **{cell(r.name)}** ({code(r.id)}): {cell(r.description)}" for r in report.rules
        ]
        lines.append("")
    return no_ci_command("\n".join(lines))


def _github_whole(report: CheckReport) -> str:
    out = []
    for c in report.checks:
        if c.passed:
            continue
        title = github.escape_property(f"rmsnorm-eps {c.rule}: {c.name}")
        source = report.source_of(c)
        props = f"title={title}" + (f",file={github.escape_property(source)}" if source else "")
        kind = "error" if c.level == "error" else "warning"
        out.append(f"::{kind} {props}::{github.escape_data(c.message)}\n")
    return "".join(out)


def _whole(result: object, fmt: str, gate: Any) -> str:
    """``fmt``'s text of ``result`` from the oracles above (json and sarif: ``json.dumps``)."""
    if fmt == "json":
        return json_text(json.dumps(document(result, gate), indent=2, allow_nan=False) + "\n")
    report = check_report(result, gate)
    if fmt == "sarif":
        return json_text(json.dumps(sarif.sarif_document(report), indent=2) + "\n")
    return {"markdown": _markdown_whole, "github": _github_whole, "junit": _junit_whole}[fmt](
        report
    )


# ----------------------------------------------------------------------------- results
def _write(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    np.savez(path, **arrays)
    return path


def _results(tmp: Path) -> dict[str, tuple[object, Any]]:
    """Results that use every part of the documents and checks, with their gates."""
    q = np.array([1e-9, 1.0, 2.0, 1e-8], dtype=np.float32)
    hostile = _write(tmp / "::error::p##[x].npz", {name: q for name in NAMES})
    qp = np.array([8e-5, 5e-2, 6e-2, 7e-2, 3e-4, 4e-2, 5e-2, 6e-2, 6e-4, 1e-2, np.nan, np.inf])
    pos = np.tile(np.arange(4, dtype=np.int64), 3)
    positions = _write(
        tmp / "pos.npz",
        {
            "L<&>'": qp.astype(np.float32),
            "L<&>'::position": pos,
            "M": (qp * 1e6),
            "M::position": pos,
        },
    )
    skip = ROOT / "tests/data/skip/mixed.npz"
    ratio = analyze_dump(hostile, 1e-5, top_k=2)
    out: dict[str, tuple[object, Any]] = {
        "example": (analyze_dump(ROOT / "examples/ci/q_dump.npz", 1e-5, top_k=3), None),
        "hostile": (ratio, evaluate_gate(ratio)),
        "hostile-budget": (ratio, evaluate_gate(ratio, max_violations=1000)),
        "positions": (analyze_dump(positions, 1e-5, top_k=3), None),
        "top0": (analyze_dump(positions, 1e-5, top_k=0), None),
        "skipped": (analyze_dump(skip, 1e-5, skip_unreadable=True), None),
        "passing": (analyze_dump(ROOT / "examples/q_dump.npz", 1e-12), None),
    }
    shards = [ROOT / "tests/data/merge" / f"shard{i}.summary.json" for i in (0, 1)]
    merged = merge_summaries(shards, top_k=3)
    out["merge"] = (merged, evaluate_gate(merged))
    frm, to = parse_spec("eps=1e-6"), parse_spec("eps=1e-5")
    cmp = compare_dump(hostile, frm, to, top_k=2)
    out["compare-hostile"] = (cmp, evaluate_gate(cmp))
    out["compare-positions"] = (compare_dump(positions, frm, to), None)
    out["compare-skipped"] = (compare_dump(skip, frm, to, skip_unreadable=True), None)
    return out


def _eps_source(result: RatioReport) -> RatioReport:
    """``result`` as ``ratio --config`` gives it: each layer says where its eps came from."""
    layers = tuple(
        dataclasses.replace(ly, eps_source=f'cfg.yaml: layers["{ly.name}"].eps ##[x]')
        for ly in result.layers
    )
    return dataclasses.replace(result, layers=layers)


def _check_reports() -> dict[str, CheckReport]:
    """Hand-made check reports: no checks, no source, no facts, no rules, warnings, sources
    per check, a check without numbers, hostile text everywhere."""
    rules = (Rule("x/a", "a<b>", "rule ## a: `|`"), Rule("x/b", "b", "::b"))
    checks = (
        Check("x/a", "::n##[x]\n", False, "error", "m ::x\r\n##vso[", {"v": 1.5, "w": None}),
        Check("x/b", "<h1>", False, "warning", "w & <b>", {"k": "s<>"}, source="sh ::1.npz"),
        Check("x/a", "`ok`", True, "note", "fine", {}),
        Check("x/b", "e", False, "error", "no numbers"),
    )
    base = CheckReport(
        command="x",
        title="t ::x",
        source="src ##[x].npz",
        subject="item",
        rules=rules,
        checks=checks,
        passed=False,
        verdict="v :: ##[v]",
        facts=(("k ::", "v ##[x]"),),
    )
    return {
        "hand": base,
        "hand-lazy": dataclasses.replace(base, checks=Lazy(len(checks), lambda: iter(checks))),
        "empty": dataclasses.replace(base, checks=(), facts=(), rules=(), source=None),
        "passing": dataclasses.replace(base, checks=checks[2:3], passed=True),
        "no-source": dataclasses.replace(base, source=None),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, Any]]:
    out = _results(tmp_path_factory.mktemp("streaming"))
    example = out["example"][0]
    assert isinstance(example, RatioReport)
    out["eps-source"] = (_eps_source(example), None)
    return out


def _chunks(result: object, fmt: str, gate: Any) -> list[str]:
    chunks = list(render_chunks(result, fmt, RenderOptions(gate=gate)))
    for chunk in chunks:
        assert chunk.endswith("\n"), (fmt, chunk[-80:])  # whole lines only
    return chunks


# ----------------------------------------------------------------------------- (a)
@pytest.mark.parametrize("fmt", STREAMED)
def test_chunks_are_whole_lines_and_the_whole_documents_bytes(
    results: dict[str, tuple[object, Any]], fmt: str
) -> None:
    for name, (result, gate) in results.items():
        chunks = _chunks(result, fmt, gate)
        text = "".join(chunks)
        assert text == render(result, fmt, RenderOptions(gate=gate)), name
        assert text == _whole(result, fmt, gate), (name, fmt)


@pytest.mark.parametrize("fmt", CHECK_FORMATS)
def test_hand_made_check_reports_match_the_whole_documents(fmt: str) -> None:
    for name, report in _check_reports().items():
        chunks = _chunks(report, fmt, None)
        text = "".join(chunks)
        module = {"markdown": markdown, "github": github, "junit": junit, "sarif": sarif}[fmt]
        assert text == module.render_checks(report), name
        if fmt == "sarif":
            oracle = json_text(json.dumps(sarif.sarif_document(report), indent=2) + "\n")
        else:
            oracle = {"markdown": _markdown_whole, "github": _github_whole, "junit": _junit_whole}[
                fmt
            ](report)
        assert text == oracle, (name, fmt)


def test_many_chunks_are_cut_at_line_ends(
    results: dict[str, tuple[object, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With chunks of ~100 characters, every report is cut in many places (inside failure
    texts, tables, JSON strings' lines), only after a newline, and nothing is lost."""
    from rmsnorm_eps import chunks

    monkeypatch.setattr(chunks, "CHUNK_CHARS", 100)
    for name, (result, gate) in results.items():
        for fmt in STREAMED:
            chunks = _chunks(result, fmt, gate)
            text = "".join(chunks)
            assert len(chunks) > 1 or len(text) < 200, (name, fmt)
            assert text == _whole(result, fmt, gate), (name, fmt)
    for name, report in _check_reports().items():
        for fmt in CHECK_FORMATS:
            text = "".join(_chunks(report, fmt, None))
            assert text == render(report, fmt), (name, fmt)


def test_no_chunk_ever_starts_a_ci_command(results: dict[str, tuple[object, Any]]) -> None:
    """Each chunk is escaped on its own: a line start is a line start in every chunk."""
    command = re.compile(r"^[ \t]*::|##\[|##vso\[", re.MULTILINE)
    for result, gate in results.values():
        for fmt in ("json", "markdown", "junit", "sarif"):
            for chunk in _chunks(result, fmt, gate):
                assert not command.search(chunk), fmt


# ----------------------------------------------------------------------------- checks
def test_lazy_checks_are_made_on_each_pass_and_never_held() -> None:
    example = analyze_dump(ROOT / "examples/ci/q_dump.npz", 1e-5, top_k=3)
    report = check_report(example)
    assert isinstance(report.checks, Lazy) and len(report.checks) == 2 * len(example.layers)
    first, again = next(iter(report.checks)), next(iter(report.checks))
    assert first == again and first is not again  # made anew on each pass, never kept
    assert isinstance(report.failed, Lazy)
    assert report.counts["failed"] == len(report.failed) == 2
    assert report.sources == (example.source,)
    skipped = check_report(
        analyze_dump(ROOT / "tests/data/skip/mixed.npz", 1e-5, skip_unreadable=True)
    )
    assert isinstance(skipped.checks, Lazy)
    assert [(c.rule, c.name) for c in skipped.failed] == [
        ("ratio/unreadable", "b"),
        ("ratio/unreadable", "c"),
    ]


def test_document_lists_are_lazy_for_writing_and_plain_for_callers() -> None:
    from rmsnorm_eps.reports.commands import ratio

    example = analyze_dump(ROOT / "examples/ci/q_dump.npz", 1e-5, top_k=3)
    doc = ratio.document(example)
    assert isinstance(doc["layers"], Lazy) and isinstance(doc["summary"]["layers_affected"], Lazy)
    plain = document(example)
    assert type(plain["layers"]) is list and type(plain["summary"]["layers_affected"]) is list
    assert plain["summary"]["layers_affected"] == list(example.layers_affected)


# ----------------------------------------------------------------------------- (b)
N_LAYERS = 10_000
#: Python memory that rendering 10,000 layers may hold. The whole-document writers held 18 MiB
#: (markdown) to 115 MiB (json) at that size, ~11 KiB per layer for json; the streaming ones
#: ~0.5 MiB whatever the size: a chunk, one layer's entry, the layers_affected tuple.
BOUND = 4 * 2**20


@pytest.fixture(scope="module")
def many() -> tuple[RatioReport, Any]:
    """10,000 layers: the example's four over and over (below the bound, NaN, passing)."""
    example = analyze_dump(ROOT / "examples/ci/q_dump.npz", 1e-5, top_k=3)
    kinds = example.layers
    layers = tuple(
        dataclasses.replace(kinds[i % len(kinds)], name=f"model.layers.{i}.input_layernorm")
        for i in range(N_LAYERS)
    )
    report = dataclasses.replace(example, layers=layers)
    return report, evaluate_gate(report)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", STREAMED)
def test_rendering_many_layers_holds_bounded_memory(
    many: tuple[RatioReport, Any], fmt: str
) -> None:
    report, gate = many
    warm = dataclasses.replace(report, layers=report.layers[:8])  # imports, caches: not counted
    assert render(warm, fmt, RenderOptions(gate=gate))
    size = 0
    tracemalloc.start()
    try:
        for chunk in render_chunks(report, fmt, RenderOptions(gate=gate)):
            size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # far less than the output (megabytes) is ever held
    assert peak < min(BOUND, size // 4), f"{fmt}: {peak / 2**20:.1f} MiB for {size} characters"


# ----------------------------------------------------------------------------- (c)
def test_junit_and_sarif_stay_valid(results: dict[str, tuple[object, Any]]) -> None:
    for name, (result, gate) in results.items():
        report = check_report(result, gate)
        root = ET.fromstring(render(result, "junit", RenderOptions(gate=gate)).encode("utf-8"))
        assert root.tag == "testsuites" and root[0].tag == "testsuite", name
        cases = root[0].findall("testcase")
        assert len(cases) == max(1, len(report.checks))
        assert int(root.get("failures", "")) == len(root[0].findall("testcase/failure"))
        doc = json.loads(render(result, "sarif", RenderOptions(gate=gate)))
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(doc)
        assert len(doc["runs"][0]["results"]) == report.counts["failed"], name
