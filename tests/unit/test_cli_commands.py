"""The table of commands (rmsnorm_eps.cli._commands) and the group that builds them on use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import typer.main
from typer.testing import CliRunner

from rmsnorm_eps.cli import app
from rmsnorm_eps.cli._commands import COMMANDS, short_help

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, runpy, io, contextlib
sys.argv = ["rmsnorm-eps", *{args!r}]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("rmsnorm_eps", run_name="__main__")
    except SystemExit:
        pass
built = (m for m in sys.modules if m.startswith("rmsnorm_eps.cli.") and m.endswith("_cmd"))
print(" ".join(sorted(built)))
"""


def _command_modules(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    return set(out.stdout.split())


def test_every_registered_command_is_in_the_table_with_its_help() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    assert set(group.commands) == set(COMMANDS)
    for name, command in group.commands.items():
        assert command.short_help == short_help(name), name


def test_help_lists_the_table_in_order_without_building_a_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    listed = [
        line.split()[0]
        for line in result.output.split("Commands:", 1)[1].splitlines()
        if line.startswith("  ") and not line.startswith("    ")
    ]
    assert listed == list(COMMANDS)
    assert _command_modules("--help") == set()


def test_a_command_builds_only_its_own_module() -> None:
    assert _command_modules("bound", "--delta", "0.01") == {"rmsnorm_eps.cli.bound_cmd"}
    assert _command_modules("config", "--help") == {"rmsnorm_eps.cli.config_cmd"}


def test_an_unknown_command_is_a_usage_error_naming_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rmsnorm_eps", "nosuch"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "rmsnorm-eps: error: No such command 'nosuch'. (see --help)"
