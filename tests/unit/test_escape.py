"""rmsnorm_eps.escape: every sink's function, on arbitrary text (hypothesis), against the rules
of its docstring: one line, no control or format character, no ``::`` or ``##`` from data."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps import escape

HOSTILE = st.text(
    st.sampled_from(
        list(":#\n\r\t\x1b\x00\x7f\x85\u2028\u2029\u202e\u2066\u200b\ufeff\udcff<>&|*_$[]\\ a")
    ),
    max_size=40,
) | st.text(max_size=40)

SINKS = [
    escape.visible,
    escape.markdown,
    escape.xml,
    escape.github_data,
    escape.github_property,
    escape.plot_label,
]


#: Bidirectional and zero-width format characters, and the byte-order mark (the docstring's set).
_FORMAT = set("\u061c\u200b\u200c\u200d\u200e\u200f\u2060\ufeff") | {
    chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


def _unsafe(ch: str) -> bool:
    """A character that must never reach a sink: a control (C0, DEL, C1), a line or paragraph
    separator, a bidirectional or zero-width format character, or a lone surrogate."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or ch in _FORMAT


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_every_sink_is_one_inert_line(value: str) -> None:
    for sink in SINKS:
        out = sink(value)
        assert "::" not in out and "##" not in out, (sink.__name__, out)
        assert not any(_unsafe(ch) for ch in out), (sink.__name__, out)
        out.encode("utf-8")  # no lone surrogate left


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40))
def test_plain_ascii_is_shown_as_it_is(value: str) -> None:
    if "::" not in value and "##" not in value:
        assert escape.visible(value) == value


def test_the_escapes_name_the_code_point() -> None:
    assert escape.visible("a\nb\x1bc\u202e\udcff") == "a\\x0ab\\x1bc\\u202e\\udcff"
    assert escape.visible("a::b##c") == "a\\x3a:b\\x23#c"


@settings(max_examples=200, deadline=None)
@given(HOSTILE, st.integers(min_value=1, max_value=50))
def test_line_and_shorten_are_bounded(value: str, limit: int) -> None:
    out = escape.line(value * 3, limit)
    assert "\n" not in out and "\r" not in out
    shown = escape.shorten(value, limit)
    if len(value) <= limit:
        assert shown == value
    else:
        assert shown == f"{value[:limit]}... ({len(value)} characters)"


def test_message_keeps_double_colons_but_stays_one_line() -> None:
    out = escape.message("x::position\nnext ##[error]")
    assert "x::position" in out and "\n" not in out and "##" not in out


def test_markdown_escapes_html_and_table_syntax() -> None:
    out = escape.markdown("<b>|x")
    assert "<b>" not in out and "&lt;" in out and "\\|" in out


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_json_text_parses_to_the_exact_value(value: str) -> None:
    doc = json.dumps({"name": value}, indent=1)
    out = escape.json_text(doc)
    assert json.loads(out) == {"name": value}
    assert "##" not in out
    assert not re.search(r"^\s*::", out, flags=re.MULTILINE)


@pytest.mark.parametrize("rendered", ["::error::x\n", "ok\n  ::warning x\n", "a\n::\n"])
def test_no_ci_command_starts_a_line(rendered: str) -> None:
    out = escape.no_ci_command(rendered)
    assert not re.search(r"^\s*::", out, flags=re.MULTILINE)
    assert out.count("\n") == rendered.count("\n")


def test_plot_labels_have_no_mathtext() -> None:
    assert "$" not in escape.plot_label("$x$").replace("\\$", "")
