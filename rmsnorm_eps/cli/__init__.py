"""Command-line interface: parse options, call the library, report, map to an exit code.

Each command lives in its own module and registers itself on the shared ``app``; the table in
:mod:`rmsnorm_eps.cli._commands` names them, and a command is built only when it is used (the
console script imports no command module for ``--help``). Heavy imports (numpy, yaml, rich)
happen inside the command functions.

``rmsnorm_eps.cli.app`` is the application with every command registered (for
``typer.testing.CliRunner`` and for embedding); :func:`main` is the console script.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    """``app``: the Typer application with every command's module imported."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    from rmsnorm_eps.cli._app import app
    from rmsnorm_eps.cli._commands import COMMANDS

    for entry in COMMANDS.values():
        importlib.import_module(f"rmsnorm_eps.cli.{entry.module}")
    return app


def main() -> None:
    """Console-script entry point.

    OpenBLAS starts a thread per CPU when numpy is imported (about 40 ms here) for threading
    that level-1 kernels on rows never use; the tool runs its own reader threads instead, so the
    command line asks for one BLAS thread unless the user chose otherwise. Off a terminal,
    ``TQDM_DISABLE=1`` (unless set) keeps tqdm bars out of a log file.
    """
    import os
    import sys

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not sys.stderr.isatty():
        # Third-party progress bars (transformers' GGUF loader) only on a terminal: tqdm reads
        # TQDM_* when it is imported, and torch imports it, so it is set before anything runs.
        os.environ.setdefault("TQDM_DISABLE", "1")
    from rmsnorm_eps.cli._app import app

    app(prog_name="rmsnorm-eps")
