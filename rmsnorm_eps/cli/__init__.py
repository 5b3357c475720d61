"""Command-line interface: parse options, call the library, report, map to an exit code.

Each command lives in its own module and registers itself on the shared ``app``; heavy imports
(numpy, yaml, rich tables) happen inside the command functions so ``--help`` starts fast.
"""

from __future__ import annotations

# Importing a command module registers its command on ``app`` (one per line: easy merges).
from rmsnorm_eps.cli import (  # noqa: F401
    bound_cmd,
    capture_cmd,
    compare_cmd,
    config_cmd,
    defaults_cmd,
    merge_cmd,
    parity_cmd,
    precision_cmd,
    probe_cmd,
    ratio_cmd,
    sensitivity_cmd,
)
from rmsnorm_eps.cli._app import app

__all__ = ["app", "main"]


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
    app(prog_name="rmsnorm-eps")
