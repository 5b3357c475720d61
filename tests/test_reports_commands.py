"""CI formats, schemas, --summary and --plot for compare, precision, parity and config diff.

Each command's check adapter is exercised on the shipped examples; every format must report
the counts the adapter (and the command's own JSON document) reports.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import evaluate_gate
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.precision import precision_report
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.config import diff_configs, load_config
from rmsnorm_eps.parity.actual import read_actual
from rmsnorm_eps.parity.api import compare_outputs
from rmsnorm_eps.parity.probe_file import load_probes
from rmsnorm_eps.parity.probe_set import CATEGORIES
from rmsnorm_eps.reports import RenderOptions, check_report, render
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.schema import SCHEMA_COMMANDS, load_schema

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))
COMPARE_DUMP = "examples/q_dump.npz"
PROBES = "examples/parity/probes.npz"
TORCH_NONE = "examples/parity/torch_eps_none.npy"
TORCH_OK = "examples/parity/torch_eps_1e-6.npy"
LLAMA3, QWEN3 = "configs/llama-3-8b.yaml", "configs/qwen3-8b.yaml"
SHARDS = ("tests/data/merge/shard0.summary.json", "tests/data/merge/shard1.summary.json")


def _sarif(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    jsonschema.Draft4Validator(
        SARIF_SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    ).validate(doc)
    return doc


def _json_valid(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    jsonschema.Draft202012Validator(load_schema(doc["command"])).validate(doc)
    return doc


def _compare(max_violations: int | None = None) -> tuple[Any, Any]:
    rep = compare_dump(
        ROOT / COMPARE_DUMP, parse_spec("eps=1e-6", "--from"), parse_spec("eps=1e-5", "--to")
    )
    rep = replace(rep, source=COMPARE_DUMP)
    return rep, evaluate_gate(rep, max_violations, None)


def _parity(actual: str = TORCH_NONE) -> Any:
    out = read_actual(ROOT / actual, None)
    return compare_outputs(
        load_probes(ROOT / PROBES),
        out.values,
        output_dtype=out.dtype,
        probe_source=PROBES,
        actual_source=actual,
    )


def _config_diff() -> Any:
    return diff_configs(load_config(ROOT / LLAMA3), load_config(ROOT / QWEN3))


def _assert_formats_agree(result: object, gate: Any, rep: CheckReport) -> None:
    """markdown, github, junit, sarif and the check report hold the same counts."""
    opts = RenderOptions(gate=gate)
    c = rep.counts
    md = render(result, "markdown", opts)
    assert md.startswith(f"### {'PASS' if rep.passed else 'FAIL'}: ")
    assert (
        f"{c['checks']} check(s): {c['passed']} passed, {c['failed']} failed "
        f"({c['error']} error(s), {c['warning']} warning(s))." in md
    )
    gh = render(result, "github", opts).splitlines()
    assert sum(line.startswith("::error ") for line in gh) == c["error"]
    assert sum(line.startswith("::warning ") for line in gh) == c["warning"]
    assert len(gh) == c["failed"]
    root = ET.fromstring(render(result, "junit", opts))
    assert int(root.get("tests", "")) == max(1, c["checks"])
    assert int(root.get("failures", "")) == c["error"]
    assert len(root.findall(".//failure")) == c["error"]
    assert len(root.findall(".//system-out")) == c["warning"]
    sarif = _sarif(render(result, "sarif", opts))
    levels = [r["level"] for r in sarif["runs"][0]["results"]]
    assert levels.count("error") == c["error"] and levels.count("warning") == c["warning"]
    assert sarif["runs"][0]["invocations"][0]["properties"]["counts"] == c


# ----------------------------------------------------------------------------- compare
def test_compare_counts_in_every_format() -> None:
    rep, gate = _compare()
    checks = check_report(rep, gate)
    assert checks.counts == {
        "checks": 8,
        "passed": 7,
        "failed": 1,
        "error": 1,
        "warning": 0,
        "note": 7,
    }
    (failed,) = checks.failed
    assert (failed.rule, failed.name) == ("compare/moved", "model.layers.0.input_layernorm")
    assert failed.numbers["moved"] == 2 and failed.numbers["tolerance"] == 0.01
    assert failed.numbers["max_abs_change"] == pytest.approx(0.16334, abs=1e-5)
    _assert_formats_agree(rep, gate, checks)
    doc = _json_valid(render(rep, "json", RenderOptions(gate=gate)))
    assert (doc["summary"]["violations"], doc["summary"]["moved"]) == (2, 2)
    assert "Total: 2 violation(s) in 1 of 4 layer(s)" in render(rep, "text")


def test_compare_budget_makes_warnings() -> None:
    rep, gate = _compare(max_violations=2)
    checks = check_report(rep, gate)
    assert checks.passed and checks.counts["warning"] == 1 and checks.counts["error"] == 0
    _assert_formats_agree(rep, gate, checks)


def test_compare_nonfinite_check(write_npz: Callable[..., Path]) -> None:
    path = write_npz(a=np.array([np.nan, np.inf, 1e-3], np.float32), b=np.array([0.0, 1.0]))
    rep = compare_dump(path, parse_spec("eps=1e-6", "--from"), parse_spec("eps=1e-5", "--to"))
    checks = check_report(rep, evaluate_gate(rep))
    assert [(c.rule, c.name) for c in checks.failed] == [("compare/nonfinite", "a")]
    assert checks.failed[0].numbers == {
        "count": 3,
        "nonfinite": 2,
        "nan": 1,
        "inf": 1,
        "nonfinite_factor": 0,
    }
    _assert_formats_agree(rep, evaluate_gate(rep), checks)
    _json_valid(render(rep, "json"))


# ----------------------------------------------------------------------------- precision
def test_precision_counts_in_every_format() -> None:
    rep = precision_report(1e-8)
    checks = check_report(rep)
    assert not checks.passed and checks.counts["checks"] == 3
    assert [(c.name, c.level) for c in checks.failed] == [("float16", "error")]
    assert checks.failed[0].numbers["stored"] == 0.0
    _assert_formats_agree(rep, None, checks)
    doc = _json_valid(render(rep, "json"))
    assert doc["vanishing"] == ["float16"]


def test_precision_overflow_fails_and_clean_eps_passes() -> None:
    over = check_report(precision_report(1e6, ("float16",)))
    assert "overflows" in over.failed[0].message
    clean = check_report(precision_report(1e-5))
    assert clean.passed and clean.counts == {
        "checks": 3,
        "passed": 3,
        "failed": 0,
        "error": 0,
        "warning": 0,
        "note": 3,
    }
    assert render(precision_report(1e-5), "github") == ""


# ----------------------------------------------------------------------------- parity
def test_parity_counts_in_every_format() -> None:
    res = _parity()
    checks = check_report(res)
    assert checks.counts["checks"] == 18 and checks.counts["error"] == 4
    assert [c.name for c in checks.failed] == ["tiny", "near-eps", "at-bound", "gain-extreme"]
    assert all(c.rule == "parity/tolerance" for c in checks.failed)
    tiny = checks.failed[0].numbers
    assert (tiny["failing"], tiny["elements"], tiny["atol"], tiny["rtol"]) == (
        383,
        384,
        1e-5,
        1.3e-6,
    )
    _assert_formats_agree(res, None, checks)
    doc = _json_valid(render(res, "json"))
    assert doc["summary"]["failing_categories"] == ["tiny", "near-eps", "at-bound", "gain-extreme"]


def test_parity_pass_and_nonfinite() -> None:
    ok = check_report(_parity(TORCH_OK))
    assert ok.passed and ok.counts["failed"] == 0
    probes = load_probes(ROOT / PROBES)
    values = np.array(probes.reference, dtype=np.float64)
    values[0, 0] = np.nan  # row 0 is the zero probe
    res = compare_outputs(probes, values, output_dtype="float32")
    checks = check_report(res)
    failed = {(c.rule, c.name) for c in checks.failed}
    zero = probes.category[0]
    name = CATEGORIES[int(zero)]
    assert name == "zero"
    assert ("parity/nonfinite", name) in failed and ("parity/tolerance", name) in failed
    _assert_formats_agree(res, None, checks)
    doc = _json_valid(render(res, "json"))
    assert doc["summary"]["nonfinite"] == 1


def test_parity_source_with_a_key_is_the_file() -> None:
    res = replace(_parity(), actual_source="out.npz [y]")
    assert check_report(res).source == "out.npz"
    assert check_report(res).title.endswith("out.npz [y]")


# ----------------------------------------------------------------------------- config diff
def test_config_diff_counts_in_every_format() -> None:
    diff = _config_diff()
    checks = check_report(diff)
    # 5 norm patterns x 8 settings; eps differs for all 5, dim (a note) for q_norm and k_norm
    assert checks.counts == {
        "checks": 40,
        "passed": 33,
        "failed": 7,
        "error": 5,
        "warning": 2,
        "note": 33,
    }
    assert {c.rule for c in checks.failed if c.level == "warning"} == {"config/dim"}
    eps = checks.failed[0]
    assert eps.numbers == {"a": 1e-05, "b": 1e-06, "rel_tol": 1e-06}
    assert eps.message.startswith("DIFF eps [*.input_layernorm]: differ beyond relative tol")
    _assert_formats_agree(diff, None, checks)
    sarif = json.loads(render(diff, "sarif"))
    levels = {
        r["id"]: r["defaultConfiguration"]["level"]
        for r in sarif["runs"][0]["tool"]["driver"]["rules"]
    }
    assert levels["config/eps"] == "error" and levels["config/dim"] == "warning"
    doc = _json_valid(render(diff, "json"))
    assert doc["equivalent"] is False and len(doc["differences"]) == 5


def test_config_diff_equivalent() -> None:
    same = diff_configs(load_config(ROOT / LLAMA3), load_config(ROOT / LLAMA3))
    checks = check_report(same)
    assert checks.passed and checks.counts["failed"] == 0 and checks.counts["checks"] > 0
    assert render(same, "github") == ""
    _json_valid(render(same, "json"))


# ----------------------------------------------------------------------------- schemas, goldens
def test_every_schema_is_valid_and_shipped() -> None:
    assert set(SCHEMA_COMMANDS) >= {"compare", "precision", "parity", "config-diff"}
    for command in SCHEMA_COMMANDS:
        jsonschema.Draft202012Validator.check_schema(load_schema(command))
        assert (ROOT / f"rmsnorm_eps/data/{command}.schema.json").is_file()
    assert load_schema("config diff") == load_schema("config-diff")


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.json")))
def test_golden_json_validates(name: str) -> None:
    _json_valid((GOLDEN / name).read_text("utf-8"))


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.sarif")))
def test_golden_sarif_validates(name: str) -> None:
    _sarif((GOLDEN / name).read_text("utf-8"))


def test_schemas_reject_an_unknown_key() -> None:
    for name in ("compare", "precision", "parity", "config-diff"):
        doc = json.loads((GOLDEN / f"{name}.json").read_text("utf-8"))
        doc["surprise"] = 1
        with pytest.raises(jsonschema.ValidationError):
            _json_valid(json.dumps(doc))
    doc = json.loads((GOLDEN / "compare.json").read_text("utf-8"))
    doc["layers"][0]["decades"][0]["extra"] = 0
    with pytest.raises(jsonschema.ValidationError):
        _json_valid(json.dumps(doc))


# ----------------------------------------------------------------------------- CLI
COMMANDS = {
    "compare": (
        ("compare", "-q", COMPARE_DUMP, "--from", "eps=1e-6", "--to", "eps=1e-5"),
        "### FAIL: rmsnorm-eps compare: examples/q_dump.npz",
    ),
    "precision": (("precision", "--eps", "1e-8"), "### FAIL: rmsnorm-eps precision: eps 1e-08"),
    "parity": (
        ("parity", "--probes", PROBES, "--actual", TORCH_NONE),
        "### FAIL: rmsnorm-eps parity: examples/parity/torch_eps_none.npy",
    ),
    "merge": (
        ("merge", *SHARDS),
        "### FAIL: rmsnorm-eps merge: "
        "tests/data/merge/shard0.summary.json + tests/data/merge/shard1.summary.json",
    ),
    "config-diff": (
        ("config", "diff", LLAMA3, QWEN3),
        "### FAIL: rmsnorm-eps config diff: configs/llama-3-8b.yaml vs configs/qwen3-8b.yaml",
    ),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_format_from_environment(cli: Callable[..., Any], in_root: None, command: str) -> None:
    args, _ = COMMANDS[command]
    res = cli(*args, env={"RMSNORM_EPS_FORMAT": "github"})
    assert res.exit_code == 1 and res.stdout.startswith("::error title=rmsnorm-eps ")
    res = cli(*args, "--format", "junit", env={"RMSNORM_EPS_FORMAT": "github"})
    assert res.exit_code == 1 and ET.fromstring(res.stdout).tag == "testsuites"
    res = cli(*args, env={"RMSNORM_EPS_FORMAT": "yaml"})
    assert res.exit_code == 2 and "'yaml' is not one of" in res.stderr
    res = cli(*args, "--format", "sarif", "--exit-zero")
    assert res.exit_code == 0 and _sarif(res.stdout)["runs"][0]["results"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_summary_appends(
    cli: Callable[..., Any], in_root: None, tmp_path: Path, command: str
) -> None:
    args, heading = COMMANDS[command]
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    res = cli(*args, "--summary", "-f", "github", env=env)
    assert res.exit_code == 1
    first = summary.read_text("utf-8")
    assert first.startswith("# earlier step\n" + heading + "\n")
    res = cli(*args, "--summary", "--exit-zero", env=env)
    assert res.exit_code == 0
    second = summary.read_text("utf-8")
    assert second.startswith(first) and second.count(heading) == 2
    res = cli(*args, "--summary")
    assert "GITHUB_STEP_SUMMARY is not set" in res.stderr


def test_cli_help_lists_summary_and_plot(cli: Callable[..., Any]) -> None:
    for args, plot in (
        (("compare",), True),
        (("parity",), True),
        (("config", "diff"), False),
        (("precision",), False),
        (("merge",), True),
    ):
        out = cli(*args, "--help").stdout
        assert "--summary" in out and ("--plot" in out) == plot, args


# ----------------------------------------------------------------------------- plots
def _png_size(data: bytes) -> tuple[int, int]:
    from tests.helpers import png_size

    return png_size(data)


def test_compare_plot_png_and_svg(cli: Callable[..., Any], in_root: None, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from rmsnorm_eps.plot import plot_compare

    rep, _ = _compare()
    plot = plot_compare(rep, "png")
    assert plot.layers == tuple(layer.name for layer in rep.layers)
    assert _png_size(plot.data) == (800, 1040) == (plot.width_px, plot.height_px)
    assert plot_compare(rep, "png").data == plot.data
    svg = plot_compare(rep, "svg", max_layers=1).data.decode("utf-8")
    assert "model.layers.0.input_layernorm: 32 inputs, 2 violation(s)" in svg
    assert "tolerance 0.01" in svg and "model.norm:" not in svg
    out = tmp_path / "compare.png"
    args, _ = COMMANDS["compare"]
    res = cli(*args, "--plot", str(out), "--plot-layers", "2")
    assert res.exit_code == 1 and _png_size(out.read_bytes()) == (800, 520)
    res = cli(*args, "--plot", str(tmp_path / "compare.gif"))
    assert res.exit_code == 2 and "must end in .png or .svg" in res.stderr


def test_compare_plot_with_nan(write_npz: Callable[..., Path]) -> None:
    pytest.importorskip("matplotlib")
    from rmsnorm_eps.plot import plot_compare

    path = write_npz(
        a=np.array([np.nan, np.inf, 0.0, 1e-9, 1e-3], np.float32), b=np.array([np.nan])
    )
    rep = compare_dump(path, parse_spec("eps=1e-6", "--from"), parse_spec("eps=1e-5", "--to"))
    svg = plot_compare(rep, "svg").data.decode("utf-8")
    assert "NaN 1, inf 1, nonfinite factor 0, zero vectors (q=0) 1 (counted, not plotted)" in svg
    assert _png_size(plot_compare(rep, "png").data) == (800, 520)


def test_parity_plot(cli: Callable[..., Any], in_root: None, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from rmsnorm_eps.plot import plot_parity

    res = _parity()
    plot = plot_parity(res, "png")
    assert _png_size(plot.data) == (800, 520) and plot.layers[0] == "zero"
    svg = plot_parity(res, "svg").data.decode("utf-8")
    assert "atol 1e-05" in svg and "rtol 1.3e-06" in svg
    assert "failing category (4 of 9)" in svg
    out = tmp_path / "parity.svg"
    args, _ = COMMANDS["parity"]
    run = cli(*args, "--plot", str(out))
    assert run.exit_code == 1 and "</svg>" in out.read_text("utf-8")


def test_plots_in_the_docs_exist() -> None:
    # docs/reports.md shows them, made by the commands it shows (4 layers; 2 panels)
    assert _png_size((ROOT / "docs" / "compare-plot.png").read_bytes()) == (800, 1040)
    assert _png_size((ROOT / "docs" / "parity-plot.png").read_bytes()) == (800, 520)
    # the doc says `constant` crosses the rtol line and still passes under the torch rule
    res = _parity()
    constant = next(c for c in res.categories if c.name == "constant")
    assert constant.passed and constant.max_rel_error > res.tolerance.rtol


# ----------------------------------------------------------------------------- merge
def test_merge_counts_and_locations(in_root: None) -> None:
    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.merge import merge_summaries

    merged = merge_summaries([ROOT / s for s in SHARDS], top_k=3)
    gate = evaluate_gate(merged)
    checks = check_report(merged, gate)
    whole = check_report(analyze_dump(ROOT / "examples/ci/q_dump.npz", 1e-5, top_k=3))
    assert checks.command == "merge" and checks.source is None
    assert checks.counts == whole.counts  # the shards hold exactly the example dump
    # the summaries keep each shard's source as given to `ratio` (relative to the repo root)
    shard0, shard1 = "tests/data/merge/shard0.npz", "tests/data/merge/shard1.npz"
    assert merged.shards == (shard0, shard1)
    assert [(c.rule, c.name, c.source) for c in checks.failed] == [
        ("ratio/below-bound", "layers.0.attn_norm", shard0),
        ("ratio/nonfinite", "output_norm", shard1),
    ]
    assert checks.failed[1].message.endswith(f"first at index [2, 5] (shard 1 {shard1} at [0, 5])")
    _assert_formats_agree(merged, gate, checks)
    run = _sarif(render(merged, "sarif", RenderOptions(gate=gate)))["runs"][0]
    assert [a["location"]["uri"] for a in run["artifacts"]] == [shard0, shard1]
    assert [
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]
    ] == [shard0, shard1]
    doc = _json_valid(render(merged, "json", RenderOptions(gate=gate)))
    assert doc["command"] == "merge" and doc["summary"]["violations"] == 9


def test_merge_cli_summary_and_plot(cli: Callable[..., Any], in_root: None, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the [plot] extra
    out = tmp_path / "merge.png"
    res = cli("merge", *SHARDS, "-f", "github", "--plot", str(out))
    assert res.exit_code == 1
    assert res.stdout.splitlines()[0].startswith(
        "::error title=rmsnorm-eps ratio/below-bound%3A layers.0.attn_norm,"
        "file=tests/data/merge/shard0.npz::"
    )
    assert _png_size(out.read_bytes()) == (800, 780)


def test_compare_with_per_layer_settings(
    cli: Callable[..., Any], in_root: None, tmp_path: Path
) -> None:
    args = (
        "compare",
        "--q-file",
        "examples/configs/q_layers.npz",
        "--from",
        "config",
        "--config",
        "examples/configs/per-layer.yaml",
        "--to",
        "eps=1e-5",
    )
    res = cli(*args, "-f", "markdown")
    assert res.exit_code == 1
    assert "| from | per layer from examples/configs/per-layer.yaml |" in res.stdout
    assert "2 check(s)" not in res.stdout and "4 check(s): 3 passed, 1 failed" in res.stdout
    doc = _json_valid(cli(*args, "-f", "json").stdout)
    assert doc["from"]["per_layer"] is True
    if _has_matplotlib():
        out = tmp_path / "c.png"
        assert cli(*args, "--plot", str(out)).exit_code == 1
        assert _png_size(out.read_bytes()) == (800, 520)


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
