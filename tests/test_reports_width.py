"""Text reports at any width (docs/reports.md, "Text reports at any width").

Every main text report is rendered at 60, 80, 100, 120 and 200 columns (a terminal) and with
no width (a file or a pipe), on long layer names. At every width: no line is longer than the
width, no line ends with spaces, every number of the JSON report's per-layer figures is shown
whole (as one token), and every number of the unbounded rendering is still a whole token.
Without a width, every name is shown in full.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.bound import bound_for_delta
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.precision import precision_report
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.config import diff_configs, load_config
from rmsnorm_eps.merge.combine import merge_reports
from rmsnorm_eps.parity.actual import read_actual
from rmsnorm_eps.parity.api import compare_outputs
from rmsnorm_eps.parity.probe_file import load_probes
from rmsnorm_eps.reports import RenderOptions, render
from rmsnorm_eps.reports.checks import g as fmt
from rmsnorm_eps.reports.table import ELLIPSIS, common_prefix, ellipsize, shorten_names

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (60, 80, 100, 120, 200)
KINDS = ("self_attn.q_norm", "self_attn.k_norm", "input_layernorm", "post_attention_layernorm")
#: Long names that differ only in the middle (the layer index) and at the end.
LONG = tuple(f"model.language_model.layers.{i}.{k}" for i in (3, 12, 13) for k in KINDS)

# A number as the reports write it: 12, -3, 0.989949, 4.23149e-05, +1.5e-06 (a token: not
# inside a name such as layers.12.q_norm, not followed by more digits or letters).
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?(?![\w]|\.\d)")


def _token(number: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.])" + re.escape(number) + r"(?![\w]|\.\d)")


def _dump(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    arrays = {n: rng.lognormal(-4.0, 2.0, size=(4, 16)).astype(np.float32) for n in LONG}
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


# ----------------------------------------------------------------------------- cases
# Each case: (result, gate, numbers every width must show whole, names shown in full in files)
Case = tuple[Any, Any, list[str], list[str]]


def _ratio_numbers(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for ly in doc["layers"]:
        out += [fmt(ly["eps"]), str(ly["count"]), str(ly["nonfinite"]), str(ly["below_bound"])]
        out += [fmt(ly[k]) for k in ("min_q", "min_ratio", "min_attenuation")]
        for w in ly["worst"] if ly["violations"] else []:
            out += [fmt(w[k]) for k in ("q", "ratio", "attenuation", "loss")]
    return out


def _ratio(tmp: Path) -> Case:
    rep = analyze_dump(_dump(tmp / "a.npz", 0), 1e-5, top_k=2)
    doc = json.loads(render(rep, "json"))
    return rep, evaluate_gate(rep, None, None), _ratio_numbers(doc), list(LONG)


def _merge(tmp: Path) -> Case:
    parts = [analyze_dump(_dump(tmp / f"{i}.npz", i), 1e-5, top_k=2) for i in (1, 2)]
    rep = merge_reports(parts)
    doc = json.loads(render(rep, "json"))
    return rep, evaluate_gate(rep, None, None), _ratio_numbers(doc), list(LONG)


def _compare(tmp: Path) -> Case:
    spec_from, spec_to = parse_spec("eps=1e-6", "--from"), parse_spec("eps=1e-5", "--to")
    rep = compare_dump(_dump(tmp / "c.npz", 3), spec_from, spec_to, top_k=2)
    doc = json.loads(render(rep, "json"))
    numbers: list[str] = []
    for ly in doc["layers"]:
        numbers += [str(ly["count"]), str(ly["moved"])]
        numbers += [fmt(ly[k]) for k in ("max_abs_change", "min_factor", "max_factor")]
    return rep, evaluate_gate(rep, None, None), numbers, list(LONG)


def _precision(tmp: Path) -> Case:
    rep = precision_report(1e-8)
    doc = json.loads(render(rep, "json"))
    numbers = [f"{d['stored']:.9g}" for d in doc["dtypes"]]
    numbers += [fmt(d["max"]) for d in doc["dtypes"]]
    return rep, None, numbers, []


def _parity(tmp: Path) -> Case:
    actual = "examples/parity/torch_eps_none.npy"
    out = read_actual(ROOT / actual, None)
    rep = compare_outputs(
        load_probes(ROOT / "examples/parity/probes.npz"),
        out.values,
        output_dtype=out.dtype,
        probe_source="examples/parity/probes.npz",
        actual_source=actual,
    )
    doc = json.loads(render(rep, "json"))
    numbers: list[str] = []
    for c in doc["categories"]:
        numbers += [str(c["rows"]), f"{c['failing']}/{c['elements']}"]
        numbers += [
            fmt(c[k], 4) for k in ("max_abs_error", "max_rel_error", "min_atol", "min_rtol")
        ]
    return rep, None, numbers, [c["name"] for c in doc["categories"]]


def _config_file(tmp: Path) -> Path:
    layers = "\n".join(
        f'  "{n}": {{eps: 1e-6, dim: 128}}' if "q_norm" in n else f'  "{n}": {{}}' for n in LONG
    )
    path = tmp / "long.yaml"
    path.write_text(
        "schema_version: 1\nmodel: long-names\ndefaults:\n  eps: 1e-5\n  placement: inside\n"
        f"  gain: w\n  gain_baked: false\n  dim: 4096\n  norm: rms\nlayers:\n{layers}\n",
        encoding="utf-8",
    )
    return path


def _config_show(tmp: Path) -> Case:
    return load_config(_config_file(tmp)), None, ["4096", "128"], list(LONG)


def _config_diff(tmp: Path) -> Case:
    diff = diff_configs(load_config(_config_file(tmp)), load_config(ROOT / "configs/qwen3-8b.yaml"))
    return diff, None, [], []


def _capture(tmp: Path) -> Case:
    from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
    from rmsnorm_eps.capture.report import CaptureReport

    rng = np.random.default_rng(5)
    records = []
    for i, name in enumerate(LONG):
        q = rng.lognormal(-4.0, 2.0, size=12)
        zeros = np.zeros(12, dtype=np.int64)
        records.append(
            ModuleRecord(
                name=name,
                class_name="Qwen3RMSNorm",
                kind="rmsnorm",
                eps=1e-6 * (1 + i % 3),
                eps_source="variance_epsilon",
                dim=128,
                input_dtype="bfloat16",
                gain="w",
                weight=None,
                weight_dtype="bfloat16",
                layout="token (batch, position)",
                heads=1,
                calls=1,
                count=12,
                q=q,
                position=np.arange(12, dtype=np.int64),
                batch=zeros,
                head=zeros,
                call=zeros,
                norm="rms",
                max_calls=1,
            )
        )
    result = CaptureResult(
        tuple(records),
        sequences=1,
        tokens=12,
        summary_only=False,
        q_dtype="float32",
        min_ratio=None,
    )
    rep = CaptureReport(result, "org/long-model", {"dump": "q.npz", "config": None})
    doc = json.loads(render(rep, "json"))
    numbers: list[str] = []
    for m in doc["modules"]:
        numbers += [fmt(m["eps"], 8), str(m["count"]), fmt(m["min_ratio"])]
    return rep, None, numbers, list(LONG)


def _bound(tmp: Path) -> Case:
    rep = bound_for_delta(0.01, 1e-5)
    doc = json.loads(render(rep, "json"))
    return rep, None, [f"{doc[k]:.12g}" for k in ("min_ratio", "min_q", "min_rms")], []


CASES: dict[str, Callable[[Path], Case]] = {
    "ratio": _ratio,
    "merge": _merge,
    "compare": _compare,
    "precision": _precision,
    "parity": _parity,
    "config show": _config_show,
    "config diff": _config_diff,
    "capture": _capture,
    "bound": _bound,
}


def _text(result: Any, gate: Any, width: int | None) -> str:
    return render(result, "text", RenderOptions(width=width, gate=gate))


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("case", sorted(CASES))
def test_text_reports_fit_every_width(case: str, tmp_path: Path) -> None:
    result, gate, numbers, _ = CASES[case](tmp_path)
    unbounded = _text(result, gate, None).replace(str(tmp_path), "")  # (digits in tmp paths)
    every = sorted(set(NUMBER.findall(unbounded)))
    assert every, "the report shows no number"
    for width in WIDTHS:
        text = _text(result, gate, width)
        lines = text.splitlines()
        too_long = [line for line in lines if len(line) > width]
        assert not too_long, f"{case} at {width}: {too_long[:3]}"
        assert not [line for line in lines if line.endswith(" ")], f"{case} at {width}"
        for number in [*numbers, *every]:
            assert _token(number).search(text), f"{case} at {width}: {number} not shown whole"


@pytest.mark.parametrize("case", sorted(CASES))
def test_files_and_pipes_show_full_names_and_no_trailing_space(case: str, tmp_path: Path) -> None:
    result, gate, numbers, names = CASES[case](tmp_path)
    text = _text(result, gate, None)
    assert ELLIPSIS not in text
    assert not [line for line in text.splitlines() if line.endswith(" ")]
    for name in names:
        assert re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w.])", text), name
    for number in numbers:
        assert _token(number).search(text), number


def test_a_narrow_terminal_drops_the_common_prefix_and_says_so(tmp_path: Path) -> None:
    result, gate, _, _ = _ratio(tmp_path)
    text = _text(result, gate, 120)
    assert "layers under model.language_model.layers.\n" in text
    table = [line for line in text.splitlines() if line.startswith(" 12.self_attn.q_norm ")]
    assert len(table) == 1  # the table kept, names without their common prefix


def test_below_the_table_width_records_are_blocks(tmp_path: Path) -> None:
    result, gate, _, _ = _ratio(tmp_path)
    lines = _text(result, gate, 60).splitlines()
    i = lines.index("13.post_attention_layernorm")
    assert lines[i + 1] == "  eps: 1e-05  count: 64  nonfinite: 0  zero: 0"
    assert lines[i + 2].startswith("  min q > 0: ")


def test_capture_in_a_file_keeps_whole_module_names(tmp_path: Path) -> None:
    result, _, _, _ = _capture(tmp_path)
    long = replace(result, model="m")
    text = _text(long, None, None)
    assert all(f" {n} " in text for n in LONG)


# ----------------------------------------------------------------------------- the rule
def test_common_prefix_ends_at_a_separator_and_leaves_every_name() -> None:
    assert common_prefix(list(LONG)) == "model.language_model.layers."
    assert common_prefix(["model.norm", "model.norm.x"]) == "model."
    assert common_prefix(["a.b", "a.b"]) == ""  # one distinct name: nothing to share
    assert common_prefix(["layers.1", "layers.10"]) == "layers."
    assert common_prefix(["x/a", "x/b", "y"]) == ""


def test_ellipsize_keeps_both_ends() -> None:
    assert ellipsize("abcdefghij", 10) == "abcdefghij"
    assert ellipsize("abcdefghij", 7) == "abc" + ELLIPSIS + "hij"
    assert len(ellipsize("x" * 300, 60)) == 60


def test_shortened_names_stay_distinct_and_fit() -> None:
    names = [f"{i}.{'self_attn' * 4}.q_norm" for i in ("12", "13", "1x", "12.5")]
    names += ["a" * 30, "a" * 31, "short"]
    for width in (8, 12, 16, 20, 40):
        shown = shorten_names(names, width)
        assert len(set(shown.values())) == len(set(names)), (width, shown)
        for name, s in shown.items():
            assert s == name or ELLIPSIS in s
    shown = shorten_names(names, 16)
    assert shown["short"] == "short"
    assert all(len(s) <= 16 for s in shown.values())  # distinct at this width without growing


def test_shortened_names_in_a_table_stay_distinct(tmp_path: Path) -> None:
    result, gate, _, _ = _compare(tmp_path)
    lines = _text(result, gate, 100).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" ───")) + 1
    rows = lines[start : lines.index("", start)]
    shown = [row.split()[0] for row in rows]
    assert len(shown) == len(LONG) == len(set(shown))
    assert any(ELLIPSIS in s for s in shown)  # (this width needs the middle ellipsis)
    assert all(len(line) <= 100 for line in lines)


def test_a_terminal_report_takes_the_terminal_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from rmsnorm_eps.cli._output import render_for

    result, gate, _, _ = _ratio(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "64")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    text = render_for(result, "text", None, gate)
    assert max(len(line) for line in text.splitlines()) <= 64
    assert "layers under model.language_model.layers." in text
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)  # a pipe: full names
    piped = render_for(result, "text", None, gate)
    assert f" {LONG[0]} " in piped and ELLIPSIS not in piped


def test_wide_characters_count_as_two_cells() -> None:
    name = "模型.层." * 10 + "q_norm"
    shown = ellipsize(name, 21)
    assert ELLIPSIS in shown and shown.endswith("q_norm")
    assert sum(2 if ord(c) > 0x2E80 else 1 for c in shown) <= 21
    short = shorten_names([name, name + "x"], 20)
    assert len(set(short.values())) == 2
