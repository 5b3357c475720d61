"""Help that survives any width: no token split, examples copyable, help true per command,
completion for every closed choice."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import click
import click.formatting
import pytest
import typer.main

from rmsnorm_eps.cli import app
from rmsnorm_eps.cli._help import wrap_example, wrap_paragraphs
from rmsnorm_eps.dtypes import DTYPE_ALIASES
from tests.helpers import cli_command_paths

ROOT = Path(__file__).resolve().parents[1]
Cli = Callable[..., object]

#: The top level and every command (from rmsnorm_eps.cli._commands.COMMANDS).
COMMANDS = [(), *cli_command_paths()]


def _help(cli: Cli, command: tuple[str, ...], width: int) -> str:
    """The help as on a terminal of ``width`` columns (click lays help out 2 columns short;
    click's CliRunner forces 80 columns, so the help is asked of the command itself)."""
    saved = click.formatting.FORCED_WIDTH
    click.formatting.FORCED_WIDTH = width - 2
    try:
        cmd: click.Command = typer.main.get_command(app)
        ctx = cmd.make_context("rmsnorm-eps", [], resilient_parsing=True)
        for name in command:
            assert isinstance(cmd, click.Group)
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
            cmd = sub
        return cmd.get_help(ctx) + "\n"
    finally:
        click.formatting.FORCED_WIDTH = saved


def _tokens(text: str) -> list[str]:
    return [t for t in text.split() if t != "\\"]


@pytest.mark.parametrize("width", [60, 80, 100])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_no_token_is_split_at_any_width(cli: Cli, command: tuple[str, ...], width: int) -> None:
    wide = _tokens(_help(cli, command, 400))
    narrow_text = _help(cli, command, width)
    # the same words (a comment may move above its example): nothing was split at a hyphen
    # or inside a long word
    assert Counter(_tokens(narrow_text)) == Counter(wide)
    for line in narrow_text.splitlines():
        words = line.split()
        # a line longer than the terminal is one token that cannot be broken
        assert len(line) <= width or len(words) == 1 or line.lstrip().startswith("#"), line


@pytest.mark.parametrize("command", COMMANDS[1:], ids=" ".join)
def test_examples_are_copyable_at_80_columns(cli: Cli, command: tuple[str, ...]) -> None:
    wide = _help(cli, command, 400)
    narrow = _help(cli, command, 80)
    wide_examples = [
        ln.strip() for ln in wide.splitlines() if ln.strip().startswith("rmsnorm-eps ")
    ]
    # join continued lines back: each example is one shell command
    joined = re.sub(r" \\\n\s+", " ", narrow)
    narrow_examples = [
        ln.strip() for ln in joined.splitlines() if ln.strip().startswith("rmsnorm-eps ")
    ]
    commands = [e.split("  # ")[0] for e in wide_examples]
    assert [e.split("  # ")[0] for e in narrow_examples] == commands
    for line in narrow.splitlines():
        if line.rstrip().endswith("\\"):
            assert len(line) <= 80
    assert wide_examples, "every command shows examples"


def test_wrap_example_continues_with_backslash() -> None:
    cmd = "rmsnorm-eps ratio q.npz --eps 1e-5 --format github --report json=r.json  # gate"
    lines = wrap_example(cmd, 40, "  ")
    assert lines == [
        "  rmsnorm-eps ratio q.npz --eps 1e-5 \\",
        "    --format github --report \\",
        "    json=r.json  # gate",
    ]
    assert all(len(line) <= 40 for line in lines)
    long_note = wrap_example("rmsnorm-eps bound --delta 0.01  # " + "why " * 12, 40)
    assert long_note[0].startswith("# why") and long_note[1] == "rmsnorm-eps bound --delta 0.01"


def test_wrap_paragraphs_never_breaks_hyphenated_words() -> None:
    text = "even with --skip-unreadable, dtype=float32|float16|bfloat16 stays whole"
    lines = wrap_paragraphs(text, 12)
    assert "--skip-unreadable," in lines
    assert "dtype=float32|float16|bfloat16" in lines


@pytest.mark.parametrize(
    ("command", "has_skip"),
    [
        (("ratio",), True),
        (("compare",), True),
        (("merge",), False),
        (("parity",), False),
        (("precision",), False),
        (("config", "diff"), False),
    ],
)
def test_exit_zero_help_is_true_for_the_command(
    cli: Cli, command: tuple[str, ...], has_skip: bool
) -> None:
    text = " ".join(_help(cli, command, 400).split())
    assert ("--skip-unreadable " in text) is has_skip
    exit_zero = text.split("--exit-zero", 1)[1].split(").", 1)[0]
    assert ("--skip-unreadable" in exit_zero) is has_skip


def test_compare_eps_gets_the_right_hint(cli: Cli) -> None:
    res = cli("compare", "x.npz", "--eps", "1e-5")
    assert res.exit_code == 2  # type: ignore[attr-defined]
    err = str(res.stderr)  # type: ignore[attr-defined]
    assert "--from eps=" in err and "--help', '--report'" not in err
    assert len(err.strip().splitlines()) == 1


def _complete(*words: str) -> list[str]:
    env = dict(os.environ)
    env.update(
        COMP_WORDS=" ".join(["rmsnorm-eps", *words]),
        COMP_CWORD=str(len(words)),
        _RMSNORM_EPS_COMPLETE="complete_bash",
    )
    out = subprocess.run(
        [sys.executable, "-m", "rmsnorm_eps"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    return out.stdout.split()


def test_completion_of_closed_choices() -> None:
    assert set(_complete("ratio", "--dtype", "")) == {"bfloat16", "bf16"}
    fp = _complete("capture", "--dtype", "f")
    assert {"float32", "float16", "fp16", "fp32"} <= set(fp)
    assert all(DTYPE_ALIASES[n] in ("float32", "bfloat16", "float16") for n in fp)
    assert "hf-llama" in _complete("defaults", "--framework", "hf")
    assert "torch" in _complete("defaults", "--framework", "")
    assert _complete("ratio", "--format", "j") == ["json", "junit"]
