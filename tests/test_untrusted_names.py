"""Hostile names through every format: no CI workflow command, no markup, no raw control
character, outputs that parse, and the exact names back from JSON (issue: untrusted text).

The names are .npz member names (and the dump's own file name), run through ``ratio``,
``compare`` and ``merge`` in all six formats and ``--plot``. Every line of stdout and stderr
is read as the GitHub Actions runner reads it (:func:`runner_commands`); only the github
format's own annotations may be commands.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps import escape
from tests.conftest import run_module
from tests.helpers import FORMAT_NAMES as FORMATS
from tests.helpers import HOSTILE_CONFIG_NAMES as CONFIG_NAMES
from tests.helpers import HOSTILE_NAMES as NAMES
from tests.runner_lines import CONTROL, assert_inert, runner_commands

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))

DUMP_NAME = "::error::p##[x].npz"  # the file name is data too (it is the report's source)


def _write_dump(path: Path, names: tuple[str, ...]) -> None:
    """One layer per name: q values 1e-9 and 1e-8 violate eps 1e-5, 1 and 2 do not."""
    q = np.array([1e-9, 1.0, 2.0, 1e-8], dtype=np.float32)
    np.savez(path, **{name: q for name in names})


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The hostile dump in the working directory, named :data:`DUMP_NAME` (relative: the
    report's source starts a line)."""
    monkeypatch.chdir(tmp_path)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)
    _write_dump(tmp_path / DUMP_NAME, NAMES)
    return Path(DUMP_NAME)


def check_output(out: str, fmt: str, names: tuple[str, ...]) -> None:
    """The format parses; JSON gives the exact names back; Markdown holds no HTML from data."""
    if fmt == "json":
        doc = json.loads(out)
        assert {layer["name"] for layer in doc["layers"]} == set(names)
    elif fmt == "sarif":
        doc = json.loads(out)
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(doc)
        logical = {
            r["locations"][0]["logicalLocations"][0]["name"] for r in doc["runs"][0]["results"]
        }
        assert logical == set(names)
    elif fmt == "junit":
        root = ET.fromstring(out.encode("utf-8"))
        assert root.tag == "testsuites"
    elif fmt == "markdown":
        assert "<img" not in out and "<h1>" not in out and "<conceal" not in out
        assert out.count("<details>") == out.count("</details>") <= 1
    elif fmt == "text":
        for literal in ("[/x]", "[link=http://e]a[/link]", "[conceal]hidden", "<img src=x>"):
            assert literal in out  # shown as written, never read as rich markup
        assert "\\x1b]8;;http://e\\x07" in out and "a\\x0ab" in out


@pytest.mark.parametrize("fmt", FORMATS)
def test_ratio_every_format(cli: Callable[..., Any], hostile: Path, fmt: str) -> None:
    r = cli("ratio", "--eps", "1e-5", "--q-file", str(hostile), "--format", fmt)
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    check_output(r.stdout, fmt, NAMES)
    if fmt == "github":  # one annotation per layer (each has inputs below the bound)
        assert len(r.stdout.splitlines()) == len(NAMES)


@pytest.mark.parametrize("fmt", FORMATS)
def test_compare_every_format(cli: Callable[..., Any], hostile: Path, fmt: str) -> None:
    args = ("--from", "eps=1e-6", "--to", "eps=1e-5", "--format", fmt)
    r = cli("compare", "--q-file", str(hostile), *args)
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    check_output(r.stdout, fmt, NAMES)


@pytest.mark.parametrize("fmt", FORMATS)
def test_merge_every_format(cli: Callable[..., Any], hostile: Path, fmt: str) -> None:
    summary = "##[x]::s.json"
    r = cli("ratio", "--eps", "1e-5", "--q-file", str(hostile), "--save-summary", summary)
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, "text")
    r = cli("merge", summary, summary, "--format", fmt)
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    check_output(r.stdout, fmt, NAMES)


def test_skip_unreadable_lists_hostile_names_on_one_line(
    cli: Callable[..., Any], hostile: Path
) -> None:
    """A name in the --skip-unreadable summary line stays on that line, escaped."""
    with np.load(hostile) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["bad\n::error::x"] = np.array(["s"])  # a string array: unreadable as q
    np.savez(hostile, **arrays)
    r = cli("ratio", "--eps", "1e-5", "--q-file", str(hostile), "--skip-unreadable")
    assert r.exit_code == 1
    assert_inert(r.stdout, r.stderr, "text")
    assert len(r.stderr.splitlines()) == 1, r.stderr[:500]


def test_error_lines_are_one_bounded_inert_line(cli: Callable[..., Any], hostile: Path) -> None:
    for name in ("a\n::error::boom.npz", "##[add-mask]x.npz", "\x1b[31m" + "y" * 20_000):
        r = cli("ratio", "--eps", "1e-5", "--q-file", name)
        assert r.exit_code == 2
        assert len(r.stderr.splitlines()) == 1
        assert len(r.stderr) < 2 * escape.LINE_LIMIT
        assert_inert(r.stdout, r.stderr, "text")


def test_plot_draws_mathtext_and_missing_glyphs_silently(hostile: Path) -> None:
    """``$...$`` is literal text; a glyph missing from the font warns nothing (real process:
    warnings and logging go to the real stderr)."""
    pytest.importorskip("matplotlib")  # the [plot] extra
    dump = Path("plot.npz")
    _write_dump(dump, ("$\\frac{1}{$", "\u6f22\u5b57\u0600\U0001f600", "a\nb", "##[x]", ":"))
    res = run_module(
        "ratio", "--eps", "1e-5", "--q-file", str(dump), "--plot", "p.svg", cwd=Path.cwd()
    )
    assert res.returncode == 1, res.stderr
    assert_inert(res.stdout, res.stderr, "text")
    assert len(res.stderr.splitlines()) == 1, res.stderr
    svg = Path("p.svg").read_text(encoding="utf-8")
    assert "\\frac{1}{" in svg  # the name as text (svg.fonttype none keeps it)


def test_non_utf8_file_name_every_format(tmp_path: Path) -> None:
    """A file name that is not UTF-8 (bytes read with surrogateescape) is shown escaped."""
    raw = os.fsencode(str(tmp_path)) + b"/dump-\xff\xfe.npz"
    _write_dump(Path(os.fsdecode(raw)), ("layer",))
    for fmt in FORMATS:
        res = run_module("ratio", "--eps", "1e-5", "--q-file", os.fsdecode(raw), "--format", fmt)
        assert res.returncode == 1, res.stderr
        assert "internal error" not in res.stderr
        assert_inert(res.stdout, res.stderr, fmt)
        if fmt == "json":
            assert json.loads(res.stdout)["source"] == os.fsdecode(raw)  # exact, as Python has it
        elif fmt == "text":
            assert "\\udcff\\udcfe" in res.stdout


# ----------------------------------------------------------------------------- escape
def test_visible_escapes_and_breaks_command_prefixes() -> None:
    assert escape.visible("a\nb\r\x00\x1b\x7f\x85\u2028\ud800") == (
        "a\\x0ab\\x0d\\x00\\x1b\\x7f\\x85\\u2028\\ud800"
    )
    assert escape.visible(":::x###[") == "\\x3a\\x3a:x\\x23\\x23#["
    assert escape.visible("plain name.0/attn") == "plain name.0/attn"
    for hostile in NAMES:
        shown = escape.visible(hostile)
        assert "::" not in shown and "##" not in shown and not CONTROL.search(shown)


def test_line_is_bounded() -> None:
    shown = escape.line("z" * 10_000)
    assert shown.startswith("z" * escape.NAME_LIMIT + "...") and len(shown) < 300
    assert len(escape.message("w " * 10_000)) < escape.LINE_LIMIT + 50


def test_json_text_round_trips_and_hides_commands() -> None:
    doc = {"names": list(NAMES), "k##[x]": "##vso[y]"}
    text = escape.json_text(json.dumps(doc, indent=2))
    assert json.loads(text) == doc
    assert "##" not in text and not any(runner_commands(line) for line in text.splitlines())


def test_markdown_escapes_html_and_tables_but_keeps_comparisons() -> None:
    assert escape.markdown("<img src=x> & &amp; a|b") == "&lt;img src=x> & &amp;amp; a\\|b"
    assert escape.markdown("2 <= 3 > 1") == "2 <= 3 > 1"


def test_xml_is_well_formed_for_any_name() -> None:
    for hostile in (*NAMES, "\x00\ufffe\uffff\ud800"):
        element = ET.Element("t", {"name": escape.xml(hostile)})
        element.text = escape.xml(hostile)
        ET.fromstring(ET.tostring(element, encoding="unicode"))


def test_plot_label_has_no_mathtext() -> None:
    assert escape.plot_label("$\\frac{1}{$") == "\\$\\frac{1}{\\$"


# ----------------------------------------------------------------------------- configs


def _hostile_config(path: Path, eps: str) -> None:
    """A YAML config whose model name, source and layer globs are hostile (JSON-quoted, so
    any character can be written in YAML)."""
    layers = "".join(f"  {json.dumps(n)}: {{eps: {eps}}}\n" for n in CONFIG_NAMES)
    path.write_text(
        "schema_version: 1\n"
        f"model: {json.dumps('::error::m ##[add-mask] <h1>x</h1>')}\n"
        f"source: {json.dumps('##vso[task.complete]')}\n"
        "defaults:\n  eps: 1e-5\n  placement: inside\n  gain: w\n  norm: rms\n"
        "layers:\n" + layers,
        encoding="utf-8",
    )


@pytest.mark.parametrize("fmt", ("text", "json"))
def test_config_show(cli: Callable[..., Any], hostile: Path, fmt: str) -> None:
    _hostile_config(Path("::c##[x].yaml"), "1e-6")
    r = cli("config", "show", "::c##[x].yaml", "--format", fmt)
    assert r.exit_code == 0, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    if fmt == "json":
        assert [x["pattern"] for x in json.loads(r.stdout)["layers"]] == list(CONFIG_NAMES)


@pytest.mark.parametrize("fmt", FORMATS)
def test_config_diff(cli: Callable[..., Any], hostile: Path, fmt: str) -> None:
    _hostile_config(Path("::a##[x].yaml"), "1e-6")
    _hostile_config(Path("b.yaml"), "1e-2")
    r = cli("config", "diff", "::a##[x].yaml", "b.yaml", "--format", fmt)
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    if fmt == "json":
        assert json.loads(r.stdout)["patterns"] == list(CONFIG_NAMES)
    if fmt in ("junit", "markdown"):
        check_output(r.stdout, fmt, ())
    elif fmt == "sarif":
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(json.loads(r.stdout))
