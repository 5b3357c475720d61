"""Text format helpers: rich tables for people, readable without colour (NO_COLOR, pipes, CI
logs). Numbers are rounded for display only; every decision was taken on unrounded values.

The console never reads markup from strings (``markup=False``): a name like ``[/x]`` or
``[link=...]`` is shown as it is written, never interpreted.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

from rmsnorm_eps.escape import no_ci_command
from rmsnorm_eps.reports.options import RenderOptions

__all__ = ["fmt", "fmt_index", "render_renderables", "simple_table"]


def fmt(value: float | None, digits: int = 6) -> str:
    """Format a number for display: ``digits`` significant digits, '-' for None."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def fmt_index(index: tuple[int, ...]) -> str:
    """``[i, j]``."""
    return "[" + ", ".join(str(i) for i in index) + "]"


def simple_table(*columns: str) -> Table:
    """A header-ruled table: the first column left-aligned, the others right-aligned."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    return t


def render_renderables(parts: list[RenderableType], options: RenderOptions) -> str:
    """Render rich renderables to a string (colour only if ``options.color``)."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=options.width,
        color_system="standard" if options.color else None,
        force_terminal=options.color,
        no_color=not options.color,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    for part in parts:
        console.print(part)
    return no_ci_command(buf.getvalue())
