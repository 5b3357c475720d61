"""The Typer application, its global options and the error contract shared by all commands.

Exit codes (as ruff documents them): 0 clean, 1 findings, 2 usage, config, input or internal
error. Any :class:`RmsnormEpsError` becomes exit 2 with one line on stderr; any other exception
becomes exit 2 with one "internal error" line. ``--debug`` (or RMSNORM_EPS_DEBUG=1) re-raises
instead, showing the traceback.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Annotated, Any, NoReturn

import typer
from click import Option as _ClickOption
from click import exceptions as _cx
from typer.core import TyperCommand, TyperGroup

from rmsnorm_eps import escape
from rmsnorm_eps._version import __version__
from rmsnorm_eps.cli._help import HelpContext

__all__ = [
    "EXIT_ERROR",
    "EXIT_FINDINGS",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "Typer",
    "app",
    "fail",
    "usage_error",
]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


def fail(message: str) -> NoReturn:
    """Print ``rmsnorm-eps: error: message`` on stderr (one bounded, inert line:
    :func:`rmsnorm_eps.escape.message`) and exit 2."""
    typer.echo(f"rmsnorm-eps: error: {escape.message(message)}", err=True)
    raise typer.Exit(EXIT_ERROR)


def usage_error(message: str) -> Exception:
    """A usage error (exit 2, with the command's usage line); ``raise usage_error(...)``."""
    return _cx.UsageError(message)


_PASS_THROUGH = (_cx.ClickException, typer.Exit, typer.Abort)


def interrupted() -> None:
    """Ctrl-C: one line on stderr and exit 130. Outputs are written atomically (a temporary
    file renamed over the target), so an interrupted run leaves every existing file intact."""
    typer.echo("rmsnorm-eps: interrupted", err=True)
    sys.exit(EXIT_INTERRUPTED)


_QUOTED_DEFAULT = re.compile(r"default: \(([^()]*)\)")


def _clean_help(text: str) -> str:
    """One spelling for the ``[...]`` suffix of every option's help.

    typer < 0.20 passes the suffix through ``rich.markup.escape`` whenever rich is installed,
    even when click renders the help (``rich_markup_mode=None``), which printed ``\\[required]``;
    click puts a ``show_default`` text in parentheses (``[default: (0.01)]``) but not a value.
    No help text of ours contains a backslash or ``default: (``.
    """
    return _QUOTED_DEFAULT.sub(r"default: \1", text.replace("\\[", "["))


def _repeated_option(command: Any, ctx: Any, args: list[str]) -> str | None:
    """The first single-value option given more than once (click keeps the last silently)."""
    parser = command.make_parser(ctx)
    parser.ignore_unknown_options = True
    try:
        _opts, _rest, order = parser.parse_args(args=list(args))
    except _cx.ClickException:
        return None  # the real parse reports it
    seen: set[str] = set()
    for param in order:
        if not isinstance(param, _ClickOption) or param.multiple or param.count:
            continue
        if param.is_flag or param.name is None:
            continue
        if param.name in seen:
            return max(param.opts, key=len)
        seen.add(param.name)
    return None


class _Command(TyperCommand):
    """A command whose help shows ``[default: ...]`` plainly and whose single-value options
    may be given once: ``-q a -q b`` is a usage error, not "the last one wins"; its help is
    wrapped whole-token (:mod:`rmsnorm_eps.cli._help`)."""

    context_class = HelpContext

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Refuse a repeated single-value option, then parse as click does."""
        repeated = _repeated_option(self, ctx, args)
        if repeated is not None:
            raise _cx.UsageError(f"{repeated} given more than once (give it once)", ctx=ctx)
        return super().parse_args(ctx, args)

    def _argument_help(self, name: str | None) -> str:
        """An argument's help from its ``Annotated`` declaration: click >= 8.2 resets the
        ``help`` that typer 0.19 sets on its arguments, so the plain help lost it."""
        import typing

        function = getattr(self.callback, "__wrapped__", None)
        if function is None or name is None:
            return ""
        hint = typing.get_type_hints(function, include_extras=True).get(name)
        for info in getattr(hint, "__metadata__", ()):
            if isinstance(getattr(info, "help", None), str):
                return str(info.help)
        return ""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The Arguments and Options sections, with each argument's help (typer's plain help
        shows only an argument's name) and every suffix cleaned by :func:`_clean_help`."""
        sections: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or param.param_type_name not in sections:
                continue
            name, text = record
            own = getattr(param, "help", None) or self._argument_help(param.name)
            if own and own not in text:
                text = f"{own}  {text}".strip()
            sections[param.param_type_name].append((name, _clean_help(text)))
        for title, key in (("Arguments", "argument"), ("Options", "option")):
            if sections[key]:
                with formatter.section(title):
                    formatter.write_dl(sections[key])


class CommandGroup(TyperGroup):
    """A group that also runs itself (``parity`` and ``parity onnx``): its own options get
    :class:`_Command`'s plain help and repeated-option check, then its commands are listed."""

    context_class = HelpContext
    _argument_help = _Command._argument_help

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Refuse a repeated single-value option of the group, then parse as click does."""
        repeated = _repeated_option(self, ctx, args)
        if repeated is not None:
            raise _cx.UsageError(f"{repeated} given more than once (give it once)", ctx=ctx)
        return super().parse_args(ctx, args)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _Command.format_options(self, ctx, formatter)  # type: ignore[arg-type]
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:  # whole, wrapped, never cut
                rows.append((name, command.get_short_help_str(1 << 16)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class Typer(typer.Typer):
    """``typer.Typer`` whose commands are :class:`_Command` (plain help, no repeated options)."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", _Command)
        return super().command(*args, **kwargs)


def _debug_enabled(ctx: typer.Context) -> bool:
    return bool(ctx.meta.get("rmsnorm_eps.debug")) or os.environ.get(
        "RMSNORM_EPS_DEBUG", ""
    ) not in ("", "0")


#: (command, unknown option) -> what the user most likely meant, instead of click's guesses by
#: spelling (``compare --eps`` is "Did you mean --help, --report, --top?" otherwise).
_OPTION_HINTS: dict[tuple[str, str], str] = {
    ("compare", "--eps"): "compare takes two settings: --from eps=E1 --to eps=E2",
    ("compare", "--dtype"): "compare takes the precision in a setting: --to eps=E,dtype=bf16",
}


def _hinted(exc: _cx.ClickException) -> str:
    """The error's message, with our hint for an option a command does not take."""
    if isinstance(exc, _cx.NoSuchOption) and exc.ctx is not None:
        hint = _OPTION_HINTS.get((exc.ctx.info_name or "", exc.option_name))
        if hint is not None:
            return f"No such option {exc.option_name!r}: {hint}"
    return exc.format_message()


def _build(name: str) -> Any:
    """Import the module of command ``name`` (:data:`~rmsnorm_eps.cli._commands.COMMANDS`) and
    make its click command as typer would, or None for a name that is not a command."""
    import importlib

    from typer.main import get_command_from_info, get_group_from_info

    from rmsnorm_eps.cli._commands import COMMANDS

    entry = COMMANDS.get(name)
    if entry is None:
        return None
    importlib.import_module(f"rmsnorm_eps.cli.{entry.module}")
    short, markup = app.pretty_exceptions_short, app.rich_markup_mode
    for info in app.registered_commands:
        if info.name == name:
            return get_command_from_info(
                info, pretty_exceptions_short=short, rich_markup_mode=markup
            )
    for group in app.registered_groups:
        if group.name == name:
            return get_group_from_info(
                group, pretty_exceptions_short=short, rich_markup_mode=markup
            )
    return None  # pragma: no cover - tests/unit/test_cli_commands.py builds every entry


class _Group(TyperGroup):
    """A group whose subcommands can never leak a traceback or exit 1 on an error, and whose
    commands are built when they are used (:mod:`rmsnorm_eps.cli._commands`): ``--help`` lists
    them from the table, ``rmsnorm-eps bound`` builds ``bound`` alone."""

    context_class = HelpContext

    def list_commands(self, ctx: Any) -> list[str]:
        """The table's commands in its order, then any other registered on the group."""
        from rmsnorm_eps.cli._commands import COMMANDS

        return [*COMMANDS, *(n for n in super().list_commands(ctx) if n not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, built on first use."""
        command = super().get_command(ctx, cmd_name)
        if command is None:
            command = _build(cmd_name)
            if command is not None:
                self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The Commands section of ``--help`` from the table, without building each command
        (as click writes it: the name, then its short help)."""
        from rmsnorm_eps.cli._commands import COMMANDS

        rows = []
        for name in self.list_commands(ctx):
            if name in COMMANDS:
                rows.append((name, COMMANDS[name].help))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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
            typer.echo(f"rmsnorm-eps: error: {escape.message(_hinted(exc))} (see --help)", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("rmsnorm-eps: aborted", err=True)
            sys.exit(EXIT_ERROR)
        except KeyboardInterrupt:
            interrupted()
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)

    def invoke(self, ctx: Any) -> Any:
        from rmsnorm_eps.errors import RmsnormEpsError

        try:
            return super().invoke(ctx)
        except _PASS_THROUGH:
            raise
        except KeyboardInterrupt:
            interrupted()
        except Exception as exc:
            if _debug_enabled(ctx):
                raise
            if isinstance(exc, RmsnormEpsError):
                fail(str(exc))
            if isinstance(exc, MemoryError):
                fail("out of memory")
            fail(
                f"internal error: {type(exc).__name__}: {exc} "
                "(rerun with --debug for the traceback, and please report it)"
            )
        return None


app = Typer(
    name="rmsnorm-eps",
    cls=_Group,
    help=(
        "Find the inputs where RMSNorm's epsilon changes the output.\n\n"
        "RMSNorm computes y = g*x/sqrt(q + eps) with q = mean(x^2); eps attenuates every input "
        "by A = sqrt(q/(q+eps)). Exit codes: 0 clean, 1 violations, 2 usage or input error."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        "show_default": True,
    },
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rmsnorm-eps {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    ctx.meta["rmsnorm_eps.debug"] = debug
