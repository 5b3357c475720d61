"""One way to show untrusted text: one function per place it is written (a "sink").

Every string that came from an input (layer and member names, keys, globs, model names, file
paths, values quoted in errors) is hostile: it may hold a CI workflow command, terminal escape
sequences, markup or HTML. Before it is written, it goes through the function for its sink:

=====================  ============================================================
sink                   function
=====================  ============================================================
text report, terminal  :func:`visible` (rich: always as ``Text``, never as markup)
one stderr line        :func:`line` for a name (bounded: :data:`NAME_LIMIT` characters),
                       :func:`message` for the whole line
Markdown               :func:`markdown` (HTML and table syntax escaped)
XML 1.0 (JUnit)        :func:`xml`
JSON, SARIF            :func:`json_text` (applied to the serialized document)
GitHub annotations     :func:`github_data`, :func:`github_property`
plot labels            :func:`plot_label` (no mathtext)
=====================  ============================================================

The rules (docs/security.md, "Escaping untrusted text"):

* **Visible escapes** (:func:`visible`, the base of every text sink): C0 controls (newline, tab
  and carriage return included), DEL and C1 controls are written ``\\xNN``; line and paragraph
  separators (U+2028, U+2029), bidirectional and zero-width format characters and U+FEFF are
  written ``\\uNNNN``; a lone surrogate (a byte that was not UTF-8, decoded with Python's
  ``surrogateescape``: byte 0xNN is U+DCNN) is written ``\\udcNN``. So one name is one line.
* **No CI command**: the GitHub Actions runner executes ``::name args::data`` at the start of a
  line (after whitespace) and ``##[name args]data`` anywhere in a line; Azure Pipelines reads
  ``##vso[``. In every text sink a ``:`` followed by ``:`` is written ``\\x3a`` and a ``#``
  followed by ``#`` is written ``\\x23``, so no ``::`` and no ``##`` comes from data, wherever
  a line breaks. (A stderr line always starts with ``rmsnorm-eps: ``, so there ``::`` cannot
  start a command and is kept: :func:`line`.) In JSON a ``#`` followed by ``#`` is
  ``\\u0023`` (the document still parses to the exact name); a JSON line never starts with
  ``::``.
* The escapes are for display: a literal backslash is left as it is, so ``\\x1b`` in a text
  report may be an escape or the four characters. The JSON report has the exact name.
"""

from __future__ import annotations

import re

__all__ = [
    "NAME_LIMIT",
    "github_data",
    "github_property",
    "json_text",
    "line",
    "markdown",
    "message",
    "no_ci_command",
    "plot_label",
    "shorten",
    "visible",
    "xml",
]

#: Longest name an error line shows whole; longer ones are cut with "...".
NAME_LIMIT = 200
#: Longest error line (several names and the message around them).
LINE_LIMIT = 2000

_CHARS = (
    "[\x00-\x1f\x7f-\x9f"  # C0 (tab, newline, CR included), DEL, C1
    "\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb"  # format chars
    "\ud800-\udfff]"  # lone surrogates (surrogateescape bytes among them)
)
_UNSAFE = re.compile(_CHARS + "|:(?=:)|#(?=#)")  # and a CI command's `::` or `##`
# In a stderr line, which always starts with "rmsnorm-eps: ", `::` cannot start a line: it is
# kept, so companion keys such as `x::position` read as written in errors.
_UNSAFE_IN_LINE = re.compile(_CHARS + "|#(?=#)")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: object) -> str:
    """``value`` as one line of inert text: controls, separators, format characters and lone
    surrogates as visible escapes; no ``::`` or ``##`` left (see the module docstring)."""
    return _UNSAFE.sub(_escape, str(value))


def shorten(value: str, limit: int = NAME_LIMIT) -> str:
    """``value`` cut to ``limit`` characters, the cut marked with ``...`` and the length."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}... ({len(value)} characters)"


def line(value: object, limit: int = NAME_LIMIT) -> str:
    """For a name in a one-line message (stderr, the summary line): as :func:`visible` but
    keeping ``::`` (the line starts with ``rmsnorm-eps: ``, so it cannot start a command),
    and bounded at ``limit`` characters."""
    return shorten(_UNSAFE_IN_LINE.sub(_escape, str(value)), limit)


def message(value: object) -> str:
    """A whole stderr line's message (printed after ``rmsnorm-eps: ``): whitespace runs
    (newlines included) become one space, then :func:`line`'s escapes, bounded at
    :data:`LINE_LIMIT` characters."""
    return line(" ".join(str(value).split()), LINE_LIMIT)


_HTML = re.compile(r"&(?=[#A-Za-z0-9])|<(?=[A-Za-z/!?])")


def markdown(value: object) -> str:
    """For a Markdown table cell or line (GitHub-flavoured): :func:`visible`, then ``\\``
    and ``|`` backslash-escaped, and ``<`` (before a letter, ``/``, ``!``, ``?``) and ``&``
    (before a letter, digit or ``#``) as ``&lt;``/``&amp;`` so no HTML tag or entity comes
    from data (a lone ``<=`` stays as it is)."""
    out = visible(value).replace("\\", "\\\\").replace("|", "\\|")
    return _HTML.sub(lambda m: "&amp;" if m.group() == "&" else "&lt;", out)


def xml(value: object) -> str:
    """For XML 1.0 text and attributes: :func:`visible` leaves only characters XML 1.0
    allows (ElementTree escapes ``&``, ``<``, ``>`` and quotes)."""
    return visible(value).replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff")


_JSON_PAIR = re.compile(r"#(?=#)")


def json_text(serialized: str) -> str:
    """A serialized JSON document (``ensure_ascii``: controls, non-ASCII and surrogates are
    already ``\\uXXXX``) with every ``#`` followed by a ``#`` written ``\\u0023``: ``#``
    occurs only inside strings, so the document parses to the same values, and no line holds
    ``##[`` or ``##vso[``. Indented JSON lines start with whitespace and ``"``, ``{``,
    ``[``, ``}``, ``]``, a digit or a literal, never with ``::``."""
    return _JSON_PAIR.sub(lambda m: "\\u0023", serialized)


def github_data(value: object) -> str:
    """A workflow-command message (after ``::error ...::``): :func:`visible`, then the
    runner's own escapes (``%`` -> ``%25``; CR and LF cannot remain after visible)."""
    return visible(value).replace("%", "%25")


def github_property(value: object) -> str:
    """A workflow-command property value (``title=``, ``file=``): as :func:`github_data`,
    and ``:`` -> ``%3A``, ``,`` -> ``%2C``."""
    return github_data(value).replace(":", "%3A").replace(",", "%2C")


_COMMAND = re.compile(r"^([ \t]*):(?=:)|#(?=#(?:\[|vso\[))", re.MULTILINE)


def no_ci_command(rendered: str) -> str:
    """A last guard on a whole rendered report (text, Markdown, XML): data is escaped where it
    enters (so it holds no ``::`` and no ``##``), but data next to the report's own text, or a
    long name folded across lines, could still put ``::`` at a line start (a name ``:``
    followed by ``: ...``) or make ``##[``; that ``:`` and the first ``#`` are written
    ``\\x3a`` and ``\\x23``, as :func:`visible` writes them."""

    def sub(m: re.Match[str]) -> str:
        return "\\x23" if m.group(1) is None else m.group(1) + "\\x3a"

    return _COMMAND.sub(sub, rendered)


def plot_label(value: object) -> str:
    """For a matplotlib label: :func:`visible`, and every ``$`` as ``\\$`` so mathtext never
    parses data (``$\\frac{1}{$`` is shown, not typeset or crashed on)."""
    return visible(value).replace("$", "\\$")
