"""One CLI grammar: clean help, Enum choices, dtype aliases, the dump as an argument, repeated
options refused, deprecated spellings that warn once."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import typer.main

from rmsnorm_eps.cli import app
from rmsnorm_eps.cli._options import Format, Histogram
from rmsnorm_eps.dtypes import DTYPE_ALIASES, canonical_dtype
from rmsnorm_eps.reports import FORMATS, HISTOGRAM_CHOICES
from tests.helpers import cli_command_paths

ROOT = Path(__file__).resolve().parents[1]
Cli = Callable[..., object]

#: Every command, from rmsnorm_eps.cli._commands.COMMANDS (not written again here).
COMMANDS = cli_command_paths()


def _help(cli: Cli, *command: str) -> str:
    res = cli(*command, "--help")
    assert res.exit_code == 0, res  # type: ignore[attr-defined]
    return str(res.stdout)  # type: ignore[attr-defined]


def test_enums_match_the_library() -> None:
    assert [f.value for f in Format] == list(FORMATS)
    assert tuple(h.value for h in Histogram) == HISTOGRAM_CHOICES


@pytest.mark.parametrize("command", [(), *COMMANDS], ids=lambda c: " ".join(c) or "top")
def test_help_is_clean_and_consistent(cli: Cli, command: tuple[str, ...]) -> None:
    text = _help(cli, *command)
    assert "\\[" not in text  # typer 0.19 escaped "[default: ...]" for rich
    assert "default: (" not in text  # one way to show a default: [default: VALUE]
    if command != ("capture",):  # capture's help is converted with the capture work
        assert "(default" not in text.lower()  # not in the prose either
    if command and command != ("capture",) and "--format" in text:
        assert "--format [text|json|markdown|github|junit|sarif]" in text
        assert "default: text]" in text


def test_help_shows_argument_help(cli: Cli) -> None:
    text = _help(cli, "merge")
    assert re.search(r"SUMMARIES\.\.\.\s+Summaries written by", text)
    assert re.search(r"\[DUMP\]\s+The dump: \.npy \(one layer\)", _help(cli, "ratio"))


def test_every_command_option_is_annotated() -> None:
    """No option declared the old way (a typer.Option object as the default value)."""
    import inspect

    group = typer.main.get_command(app)
    seen = 0
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", {name: command})
        for sub in subcommands.values():
            function = sub.callback.__wrapped__
            if function.__module__.endswith("capture_cmd"):
                continue  # owned by the capture work; converted separately
            for param in inspect.signature(function).parameters.values():
                assert not isinstance(param.default, typer.models.ParameterInfo), (name, param)
                seen += 1
    assert seen > 80


def test_completion_is_installable(cli: Cli) -> None:
    text = _help(cli)
    assert "--install-completion" in text and "--show-completion" in text
    docs = (ROOT / "docs" / "cli.md").read_text("utf-8")
    assert "--install-completion" in docs


@pytest.mark.parametrize(
    "args",
    [
        ("ratio", "-q", "a.npy", "-q", "b.npy", "--eps", "1e-5"),
        ("ratio", "x.npy", "--eps", "1e-5", "--eps", "1e-6"),
        ("compare", "x.npy", "--from", "eps=1", "--from", "eps=2", "--to", "eps=1"),
        ("bound", "--delta", "0.1", "--delta=0.2"),
        ("ratio", "x.npy", "--eps", "1e-5", "-f", "json", "--format", "text"),
    ],
)
def test_repeated_single_value_option_is_an_error(cli: Cli, args: tuple[str, ...]) -> None:
    res = cli(*args)
    assert res.exit_code == 2  # type: ignore[attr-defined]
    assert "given more than once" in res.stderr  # type: ignore[attr-defined]
    assert len(res.stderr.splitlines()) == 1  # type: ignore[attr-defined]


def test_repeatable_options_stay_repeatable(cli: Cli) -> None:
    res = cli("precision", "--eps", "1e-6", "--dtype", "bf16", "--dtype", "fp32,f16")
    assert res.exit_code == 0, res  # type: ignore[attr-defined]
    doc = json.loads(cli("precision", "--eps", "1e-6", "--dtype", "bf16,FP16", "-f", "json").stdout)  # type: ignore[attr-defined]
    assert [r["dtype"] for r in doc["dtypes"]] == ["bfloat16", "float16"]


def test_dump_argument_or_q_file(cli: Cli, write_npy: Callable[..., Path]) -> None:
    path = str(write_npy(np.array([1e-4, 1.0, 2.0], np.float32)))
    positional = cli("ratio", path, "--eps", "1e-5", "-f", "json")
    option = cli("ratio", "--q-file", path, "--eps", "1e-5", "-f", "json")
    assert positional.exit_code == option.exit_code == 1  # type: ignore[attr-defined]
    assert positional.stdout == option.stdout  # type: ignore[attr-defined]
    both = cli("ratio", path, "-q", path, "--eps", "1e-5")
    assert both.exit_code == 2 and "give the dump once" in both.stderr  # type: ignore[attr-defined]
    none = cli("ratio", "--eps", "1e-5")
    assert none.exit_code == 2 and "-q/--q-file" in none.stderr  # type: ignore[attr-defined]
    cmp = cli("compare", path, "--from", "eps=1e-5", "--to", "eps=1e-6", "-f", "json")
    assert cmp.exit_code in (0, 1), cmp  # type: ignore[attr-defined]


@pytest.mark.parametrize("spelling", ["bfloat16", "bf16", "BF16"])
def test_bfloat16_bits_in_ratio_and_compare(
    cli: Cli, write_npy: Callable[..., Path], spelling: str
) -> None:
    values = np.array([2.0**-10, 1.0, 2.0, 0.5, 3.0], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact: these are bf16 values
    path = str(write_npy(bits, "bf16.npy"))
    ref = str(write_npy(values, "f32.npy"))
    for command in (
        ("ratio", "--eps", "1e-5"),
        ("compare", "--from", "eps=1e-5", "--to", "eps=1e-6"),
    ):
        got = cli(command[0], path, *command[1:], "--dtype", spelling, "-f", "json")
        want = cli(command[0], ref, *command[1:], "-f", "json")
        g, w = json.loads(got.stdout), json.loads(want.stdout)  # type: ignore[attr-defined]
        assert g["summary"] == w["summary"], command
    bad = cli("compare", path, "--from", "eps=1", "--to", "eps=2", "--dtype", "int8")
    assert bad.exit_code == 2 and "'int8' is not one of bfloat16" in bad.stderr  # type: ignore[attr-defined]


def test_dtype_aliases() -> None:
    every = ("float16", "bfloat16", "float32", "float64")
    assert {canonical_dtype(a, every) for a in DTYPE_ALIASES} == set(every)
    assert canonical_dtype(" FP32 ", every) == "float32"
    with pytest.raises(ValueError, match="'float64' is not one of float16, bfloat16, float32"):
        canonical_dtype("float64", every[:3])


def test_probe_save_data_and_deprecated_out(cli: Cli, tmp_path: Path) -> None:
    new = cli("probe", "--dim", "8", "--eps", "1e-6", "--save-data", str(tmp_path / "a.npz"))
    assert new.exit_code == 0 and "deprecated" not in new.stderr  # type: ignore[attr-defined]
    old = cli("probe", "--dim", "8", "--eps", "1e-6", "--out", str(tmp_path / "b.npz"))
    assert old.exit_code == 0 and old.stdout == new.stdout.replace("a.npz", "b.npz")  # type: ignore[attr-defined]
    warnings = [line for line in old.stderr.splitlines() if "deprecated" in line]  # type: ignore[attr-defined]
    assert warnings == [
        "rmsnorm-eps: warning: --out is deprecated, use --save-data (-o/--output is the report)"
    ]
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    both = cli("probe", "--dim", "8", "--eps", "1e-6", "--out", "x.npz", "--save-data", "y.npz")
    assert both.exit_code == 2  # type: ignore[attr-defined]
    neither = cli("probe", "--dim", "8", "--eps", "1e-6")
    assert neither.exit_code == 2 and "--save-data" in neither.stderr  # type: ignore[attr-defined]
    assert not re.search(
        r"--out\b(?!put)", _help(cli, "probe")
    )  # hidden: the help teaches the new name only
    fp = cli(
        "probe",
        "--dim",
        "8",
        "--eps",
        "1e-6",
        "--dtype",
        "bf16",
        "--save-data",
        str(tmp_path / "c.npz"),
    )
    assert fp.exit_code == 0, fp  # type: ignore[attr-defined]


def test_negative_q_on_activations_suggests_raw(cli: Cli, write_npz: Callable[..., Path]) -> None:
    rng = np.random.default_rng(0)
    acts = write_npz("acts.npz", h=rng.standard_normal((4, 64)))
    for command in (("ratio", "--eps", "1e-5"), ("compare", "--from", "eps=1", "--to", "eps=2")):
        res = cli(command[0], str(acts), *command[1:])
        assert res.exit_code == 2  # type: ignore[attr-defined]
        assert res.stderr.rstrip().endswith("rather than q, add --raw"), res  # type: ignore[attr-defined]
    short = write_npz("short.npz", h=np.array([[1.0, -1.0, 2.0]]))
    res = cli("ratio", str(short), "--eps", "1e-5")
    assert res.exit_code == 2 and "--raw" not in res.stderr  # type: ignore[attr-defined]
