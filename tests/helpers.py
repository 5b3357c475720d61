"""Helpers shared by test modules (no test module imports another: they import from here)."""

from __future__ import annotations

import click
import typer.main

from rmsnorm_eps.cli import app
from rmsnorm_eps.cli._commands import COMMANDS


def cli_command_paths() -> list[tuple[str, ...]]:
    """Every command of the CLI as the words that run it (``("ratio",)``, ``("config",
    "diff")``), derived from :data:`rmsnorm_eps.cli._commands.COMMANDS` (a group's
    subcommands from the group itself), sorted."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    paths: list[tuple[str, ...]] = []
    for name in COMMANDS:
        command = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if isinstance(command, click.Group):
            paths.extend((name, sub) for sub in command.list_commands(ctx))
        else:
            paths.append((name,))
    return sorted(paths)
