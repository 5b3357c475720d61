"""The reporter registry: every command the CLI offers has a reporter class, every format that
reporter's roles serve renders through the CLI, every other format is refused with exit 2 and
one line, and each writer calls the role its format needs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_eps.reports import Format, RenderOptions, UnsupportedResult, render
from rmsnorm_eps.reports.checks import Check, CheckReport, Rule
from rmsnorm_eps.reports.interface import (
    ChecksRole,
    DocumentRole,
    MarkdownRole,
    Reporter,
    TextRole,
    formats_of,
)
from rmsnorm_eps.reports.options import CHECK_FORMATS
from rmsnorm_eps.reports.registry import (
    CHECK_WRITERS,
    REPORTERS,
    WRITERS,
    command_of,
    reporter_class,
    reporter_for,
    supported_formats,
)
from tests.helpers import GOLDEN_CASES

ROOT = Path(__file__).resolve().parents[2]

#: Commands without golden files: one cheap run each, every format.
CASES: dict[str, tuple[str, ...]] = {
    "probe": ("probe", "--dim", "8", "--eps", "1e-6"),
    "config show": ("config", "show", "configs/smollm2-135m.yaml"),
    "defaults": ("defaults", "--framework", "torch", "--dtype", "bfloat16"),
    "bound": ("bound", "--table"),  # A at given ratios: text, json and markdown only
}
#: ``capture`` needs a model: tests/test_reports_capture.py runs it in all six formats;
#: ``parity onnx`` needs an exported graph: tests/test_onnx_parity.py and
#: tests/test_reports_formats.py render it in all six; ``sensitivity`` needs a model:
#: tests/test_sensitivity.py runs it in all six.
ELSEWHERE = {"capture", "parity onnx", "sensitivity"}


def test_every_command_has_a_concrete_reporter() -> None:
    """Each registry line resolves to a Reporter whose roles are all implemented (an abstract
    method left would make the class impossible to instantiate)."""
    for name in REPORTERS:
        cls = reporter_class(name)
        assert issubclass(cls, Reporter), name
        cls(RenderOptions())  # raises TypeError when a role's method is missing
        assert {"text", "json"} <= supported_formats(name), name
    with pytest.raises(KeyError):
        reporter_class("nope")


def test_every_command_is_exercised_in_every_format() -> None:
    golden = {
        args[0] if args[0] != "config" else " ".join(args[:2]) for args, _ in GOLDEN_CASES.values()
    }
    assert set(REPORTERS) <= golden | set(CASES) | ELSEWHERE


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("command", sorted(CASES))
def test_cli_serves_or_refuses_each_pair(
    cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: str,
    fmt: Format,
) -> None:
    monkeypatch.chdir(ROOT)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    extra = ("--save-data", str(tmp_path / "probes.npz")) if command == "probe" else ()
    res = cli(*CASES[command], *extra, "--format", fmt.value)
    served = fmt.value in supported_formats(command)
    if command == "bound":  # the ratio table has no check report: markdown is its own table
        served = fmt in (Format.TEXT, Format.JSON, Format.MARKDOWN)
    if served:
        assert res.exit_code == 0, res
        assert res.stdout.strip(), res
    else:
        assert res.exit_code == 2, res
        refusal = f"--format {fmt.value} is not available for this output (see --help)"
        assert res.stderr.strip().splitlines() == [f"rmsnorm-eps: error: {refusal}"]


class _Result:
    command = "fake"


class _TextOnly(Reporter, TextRole[_Result]):
    def text(self, result: _Result) -> str:
        return f"text {self.options.width}\n"


class _Everything(
    Reporter, TextRole[_Result], DocumentRole[_Result], MarkdownRole[_Result], ChecksRole[_Result]
):
    def text(self, result: _Result) -> str:
        return "t\n"

    def document(self, result: _Result) -> dict[str, object]:
        return {"command": "fake", "n": 1}

    def markdown(self, result: _Result) -> str:
        return "own markdown\n"

    def checks(self, result: _Result) -> CheckReport:
        return CheckReport("fake", "a fake", None, "thing", (), (), True, "nothing")


def test_formats_follow_the_roles() -> None:
    assert formats_of(_TextOnly) == {Format.TEXT}
    assert formats_of(_Everything) == set(Format)


def test_each_writer_calls_its_role() -> None:
    text_only = _TextOnly(RenderOptions(width=33))
    assert WRITERS[Format.TEXT](text_only, _Result()) == "text 33\n"
    for fmt in set(Format) - {Format.TEXT}:
        with pytest.raises(UnsupportedResult):
            WRITERS[fmt](text_only, _Result())
    full = _Everything()
    assert WRITERS[Format.JSON](full, _Result()) == '{\n  "command": "fake",\n  "n": 1\n}\n'
    assert WRITERS[Format.MARKDOWN](full, _Result()) == "own markdown\n"  # its own, not checks
    assert '"name": "rmsnorm-eps"' not in WRITERS[Format.JUNIT](full, _Result())
    assert WRITERS[Format.JUNIT](full, _Result()).startswith("<?xml")


def test_unknown_format_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        render(object(), "yaml")


# ----------------------------------------------------------------------------- command_of
class _Ratio:
    command = "ratio"

    def __init__(self, shards: tuple[str, ...] = ()) -> None:
        self.shards = shards


class _Nameless:
    pass


class _Unknown:
    command = "nope"


def test_command_of_reads_the_type_and_a_ratio_of_shards_is_a_merge() -> None:
    assert command_of(_Ratio()) == "ratio"
    assert command_of(_Ratio(("a.json", "b.json"))) == "merge"
    assert command_of((_Ratio(), _Ratio())) == "ratio"  # a tuple: its items' command
    for bad in (_Nameless(), _Unknown(), (), object()):
        with pytest.raises(UnsupportedResult, match="no reporter for"):
            command_of(bad)


def test_reporter_for_makes_the_commands_class_with_the_options() -> None:
    opts = RenderOptions(width=51)
    reporter = reporter_for(_Ratio(("s0",)), opts)
    assert type(reporter) is reporter_class("merge") is reporter_class("ratio")
    assert reporter.options is opts


def test_each_registry_line_names_a_module_and_class_of_reports_commands() -> None:
    for command, target in REPORTERS.items():
        module, sep, name = target.partition(":")
        assert sep == ":" and module and name, command
        cls = reporter_class(command)
        assert (cls.__module__, cls.__name__) == (f"rmsnorm_eps.reports.commands.{module}", name)


def test_supported_formats_are_the_roles_formats() -> None:
    for command in REPORTERS:
        assert supported_formats(command) == {f.value for f in formats_of(reporter_class(command))}
    every = {f.value for f in Format}
    no_checks = {"probe", "config show", "defaults"}
    for command in set(REPORTERS) - no_checks:  # (bound: its ratio table refuses checks itself)
        assert supported_formats(command) == every, command
    for command in no_checks:
        assert supported_formats(command) == {"text", "json"}, command


def test_every_format_has_a_writer_and_every_check_format_a_check_writer() -> None:
    assert set(WRITERS) == set(Format)
    assert set(CHECK_WRITERS) == CHECK_FORMATS
    assert [f.value for f in Format] == ["text", "json", "markdown", "github", "junit", "sarif"]


def test_check_writers_call_their_formats_module() -> None:
    """Each check writer's output is that format module's ``render_checks`` of the report."""
    from rmsnorm_eps.reports.formats import github, junit, markdown, sarif

    report = CheckReport(
        "fake",
        "a fake",
        "d.npz",
        "layer",
        (Rule("fake/r", "r", "the rule"),),
        (Check("fake/r", "l", False, "error", "bad"),),
        False,
        "1 violation(s)",
    )
    modules = {
        Format.MARKDOWN: markdown,
        Format.GITHUB: github,
        Format.JUNIT: junit,
        Format.SARIF: sarif,
    }
    outputs = set()
    for fmt, module in modules.items():
        out = CHECK_WRITERS[fmt](report)
        assert out == module.render_checks(report), fmt
        assert render(report, fmt) == out  # a check report renders as it is
        outputs.add(out)
    assert len(outputs) == 4
    with pytest.raises(UnsupportedResult, match="text format cannot render a check report"):
        render(report, Format.TEXT)


def test_a_check_writer_on_a_reporter_without_the_role_is_refused() -> None:
    with pytest.raises(UnsupportedResult, match="sarif format is not available for _TextOnly"):
        WRITERS[Format.SARIF](_TextOnly(), _Result())
    with pytest.raises(UnsupportedResult, match="json format is not available"):
        WRITERS[Format.JSON](_TextOnly(), _Result())
