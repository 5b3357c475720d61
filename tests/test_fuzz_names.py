"""Fuzzing the text sinks with arbitrary names (issue 12): any string, including lone
surrogates, controls, ``::``, ``##[`` and markup, written through each sink, is inert as the
Actions runner reads it, stays on its line, and (JSON, YAML record) loads back exactly.

``RMSNORM_EPS_FUZZ_EXAMPLES`` sets the number of examples (default 500, derandomized).
"""

from __future__ import annotations

import json
import os
import re

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps import escape
from rmsnorm_eps.parity.record import _yaml_dump
from tests.runner_lines import CONTROL, runner_commands

EXAMPLES = int(os.environ.get("RMSNORM_EPS_FUZZ_EXAMPLES", "500"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=not os.environ.get("RMSNORM_EPS_FUZZ_RANDOM"),
    deadline=None,
)
# Biased towards the characters that matter, plus any code point (surrogates included).
_PIECES = st.sampled_from(
    [":", "::", "#", "##", "##[", "##vso[", "[", "]", "/", "<", ">", "&", "|", "\\", "`", "$",
     "\n", "\r", "\t", " ", "\x1b", "\x85", "\u2028", "\u202e", "\ud800", "\udcff", "\ufeff",
     "error", "warning title=x", "add-mask", "a", "\ufffe", "\U0001f600"]
)  # fmt: skip
NAMES = st.one_of(
    st.lists(_PIECES | st.characters(), max_size=30).map("".join),
    st.text(st.characters(codec=None), max_size=60),
)


def _inert(text: str) -> None:
    for line in text.splitlines():
        assert runner_commands(line) == [], repr(line)


@FUZZ
@given(NAMES)
def test_visible_and_line_keep_one_inert_line(name: str) -> None:
    shown = escape.visible(name)
    assert "::" not in shown and "##" not in shown
    assert not CONTROL.search(shown) and len(shown.splitlines()) <= 1
    assert "\n" not in escape.message(name) and len(escape.message(name)) <= 2200


@FUZZ
@given(st.lists(NAMES, min_size=1, max_size=4))
def test_json_text_round_trips(names: list[str]) -> None:
    doc = {n: n for n in names} | {"list": names}
    for indent in (None, 1, 2):
        text = escape.json_text(json.dumps(doc, indent=indent, allow_nan=False))
        assert json.loads(text) == doc
        assert "##" not in text and text.isascii()
        _inert(text)


@FUZZ
@given(st.lists(NAMES, min_size=1, max_size=4))
def test_yaml_record_round_trips(names: list[str]) -> None:
    doc = {"names": names, "by": {n: i for i, n in enumerate(names)}}
    text = _yaml_dump(doc)
    assert yaml.safe_load(text) == doc
    _inert(text)
    text.encode("utf-8")  # no lone surrogate reaches the file


@FUZZ
@given(NAMES)
def test_markdown_has_no_html_or_table_break(name: str) -> None:
    shown = escape.no_ci_command(f"| {escape.markdown(name)} |")
    assert not re.search(r"<[A-Za-z/!?]", shown)
    assert not re.search(r"(?<!\\)\|", shown[1:-1])  # every | inside the cell is escaped
    _inert(shown)
