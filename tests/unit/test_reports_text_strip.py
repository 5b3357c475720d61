"""reports/formats/text.strip_trailing_spaces: what the lookahead regex it replaces removed,
and the spaces between closing colour codes too."""

from __future__ import annotations

import re

import pytest

from rmsnorm_eps.reports.formats.text import strip_trailing_spaces

OLD = re.compile(r" +(?=(?:\x1b\[[0-9;]*m)*$)")


@pytest.mark.parametrize(
    "line",
    ["a  ", "a", "  ", "", "a b  c", "\x1b[31m  red  \x1b[0m", "x\x1b[1m a\x1b[0m\x1b[2m  "],
)
def test_as_the_regex_did(line: str) -> None:
    assert strip_trailing_spaces(line) == OLD.sub("", line)


def test_spaces_between_closing_codes_go_too() -> None:
    assert strip_trailing_spaces("a \x1b[0m  \x1b[2m ") == "a\x1b[0m\x1b[2m"


def test_a_row_padded_to_a_long_name() -> None:
    line = "x" + " " * 10_000 + "1"
    assert strip_trailing_spaces(line + " " * 10_000) == line
    assert strip_trailing_spaces(line + " " * 10_000 + "\x1b[0m") == line + "\x1b[0m"
