"""Help text laid out for any terminal width without splitting a token.

click wraps help with :class:`textwrap.TextWrapper`'s defaults, which break words at hyphens
and split words longer than the line: ``--skip-`` / ``unreadable``, ``dtype=float32|floa`` /
``t16``. Here a line breaks only at spaces; a token longer than the line stands alone on its
own line. A paragraph that is a command example (it starts with ``rmsnorm-eps ``) is wrapped as
a shell line continued with `` \\``, so it can be copied from an 80-column terminal; a trailing
``# comment`` moves above the command when it does not fit after it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import click

__all__ = ["HelpContext", "HelpFormatter", "wrap_example", "wrap_paragraphs"]

_EXAMPLE_PREFIX = "rmsnorm-eps "
_CONTINUATION = " \\"


def wrap_example(command: str, width: int, indent: str = "") -> list[str]:
    """A shell command as lines of at most ``width`` columns (when its tokens allow), every
    line but the last ending in `` \\`` and continuation lines indented two more spaces."""
    code, hash_, comment = command.partition("  # ")
    tokens = code.split()
    lines: list[str] = []
    line = indent
    for token in tokens:
        candidate = f"{line} {token}" if line.strip() else f"{line}{token}"
        if line.strip() and len(candidate) + len(_CONTINUATION) > width:
            lines.append(line + _CONTINUATION)
            line = f"{indent}  {token}"
        else:
            line = candidate
    if hash_:
        note = f"  # {comment.strip()}"
        if len(line) + len(note) <= width:
            line += note
        else:
            lines.insert(0, f"{indent}# {comment.strip()}")
    lines.append(line)
    return lines


def wrap_paragraphs(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` as wrapped lines: paragraphs (separated by blank lines) keep their blank line;
    example paragraphs are wrapped by :func:`wrap_example`; a paragraph led by click's ``\\b``
    marker is kept line for line."""
    out: list[str] = []
    for paragraph in text.split("\n\n"):
        if out:
            out.append("")
        stripped = paragraph.strip("\n")
        if stripped.startswith("\b"):
            out.extend(indent + line for line in stripped[1:].strip("\n").splitlines())
            continue
        lead = len(stripped) - len(stripped.lstrip(" "))
        body = " ".join(line.strip() for line in stripped.splitlines())
        own_indent = indent + " " * lead
        if body.startswith(_EXAMPLE_PREFIX):
            out.extend(wrap_example(body, width, own_indent))
        elif body:
            out.extend(
                textwrap.wrap(
                    body,
                    max(width, 1),
                    initial_indent=own_indent,
                    subsequent_indent=own_indent,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
    return out


class HelpFormatter(click.HelpFormatter):
    """click's formatter with :func:`wrap_paragraphs` for text and definition lists."""

    def write_text(self, text: str) -> None:
        """Write ``text`` wrapped at the formatter's width and current indent."""
        indent = " " * self.current_indent
        for line in wrap_paragraphs(text, self.width, indent):
            self.write(f"{line}\n" if line else "\n")

    def write_dl(
        self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        """Two columns: the term, then its help from a fixed column (on the next line when the
        term is wider than ``col_max``); the help is wrapped whole-token."""
        rows = list(rows)
        first = min(max((len(term) for term, _ in rows), default=0), col_max) + col_spacing
        indent = " " * self.current_indent
        text_width = max(self.width - self.current_indent - first, 20)
        for term, help_text in rows:
            self.write(f"{indent}{term}")
            lines = wrap_paragraphs(help_text, text_width) if help_text else []
            if not lines:
                self.write("\n")
                continue
            if len(term) + col_spacing <= first:
                self.write(" " * (first - len(term)) + lines[0] + "\n")
                rest = lines[1:]
            else:
                rest = lines
                self.write("\n")
            pad = indent + " " * first
            for line in rest:
                self.write(f"{pad}{line}\n" if line else "\n")


class HelpContext(click.Context):
    """A click context whose help uses :class:`HelpFormatter`."""

    formatter_class = HelpFormatter
