"""The Typer application, its global options and the error contract shared by all commands.

Exit codes (as ruff documents them): 0 clean, 1 findings, 2 usage, config, input or internal
error. Any :class:`RmsnormEpsError` becomes exit 2 with one line on stderr; any other exception
becomes exit 2 with one "internal error" line. ``--debug`` (or RMSNORM_EPS_DEBUG=1) re-raises
instead, showing the traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click as typer._click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx  # type: ignore[no-redef]

from rmsnorm_eps import __version__

__all__ = ["EXIT_ERROR", "EXIT_FINDINGS", "EXIT_OK", "app", "fail", "usage_error"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


def _one_line(text: str) -> str:
    """One bounded, inert stderr line (:func:`rmsnorm_eps.escape.message`)."""
    from rmsnorm_eps.escape import message

    return message(text)


def fail(message: str) -> None:
    """Print ``rmsnorm-eps: error: message`` on stderr and exit 2."""
    typer.echo(f"rmsnorm-eps: error: {_one_line(message)}", err=True)
    raise typer.Exit(EXIT_ERROR)


def usage_error(message: str) -> Exception:
    """A usage error (exit 2, with the command's usage line); ``raise usage_error(...)``."""
    return _cx.UsageError(message)


_PASS_THROUGH = (
    _cx.ClickException,
    typer.Exit,
    typer.Abort,
    getattr(typer, "TyperException", _cx.ClickException),  # typer < 0.20 has none
)


def _debug_enabled(ctx: typer.Context) -> bool:
    return bool(ctx.meta.get("rmsnorm_eps.debug")) or os.environ.get(
        "RMSNORM_EPS_DEBUG", ""
    ) not in ("", "0")


class _Group(TyperGroup):
    """A group whose subcommands can never leak a traceback or exit 1 on an error."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; usage errors become one line on stderr and exit 2."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except _cx.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare command: show its help
                exc.show()
                sys.exit(exc.exit_code)
            typer.echo(
                f"rmsnorm-eps: error: {_one_line(exc.format_message())} (see --help)", err=True
            )
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("rmsnorm-eps: aborted", err=True)
            sys.exit(EXIT_ERROR)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)

    def invoke(self, ctx: Any) -> Any:
        from rmsnorm_eps.errors import RmsnormEpsError

        try:
            return super().invoke(ctx)
        except _PASS_THROUGH:
            raise
        except RmsnormEpsError as exc:
            if _debug_enabled(ctx):
                raise
            fail(str(exc))
        except MemoryError:
            if _debug_enabled(ctx):
                raise
            fail("out of memory")
        except Exception as exc:
            if _debug_enabled(ctx):
                raise
            fail(
                f"internal error: {type(exc).__name__}: {exc} "
                "(rerun with --debug for the traceback, and please report it)"
            )
        return None


app = typer.Typer(
    name="rmsnorm-eps",
    cls=_Group,
    help=(
        "Find the inputs where RMSNorm's epsilon changes the output.\n\n"
        "RMSNorm computes y = g*x/sqrt(q + eps) with q = mean(x^2); eps attenuates every input "
        "by A = sqrt(q/(q+eps)). Exit codes: 0 clean, 1 violations, 2 usage or input error."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rmsnorm-eps {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(
        False, "--debug", help="Show tracebacks instead of one-line errors."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    ctx.meta["rmsnorm_eps.debug"] = debug
