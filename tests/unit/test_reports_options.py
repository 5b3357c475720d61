"""reports/options.py: the formats in the order the CLI offers them, the check formats, the
presentation options (frozen, no number in them), and when colour is wanted (NO_COLOR wins
over FORCE_COLOR, empty values are unset)."""

from __future__ import annotations

import dataclasses

import pytest

from rmsnorm_eps.reports.options import (
    CHECK_FORMATS,
    HISTOGRAM_AUTO_LAYERS,
    HISTOGRAM_CHOICES,
    Format,
    RenderOptions,
    UnsupportedResult,
    color_forced,
    color_wanted,
)


def test_formats_in_cli_order_and_by_name() -> None:
    assert [f.value for f in Format] == ["text", "json", "markdown", "github", "junit", "sarif"]
    assert Format("junit") is Format.JUNIT and Format.JUNIT == "junit"
    with pytest.raises(ValueError):
        Format("yaml")
    assert {Format.MARKDOWN, Format.GITHUB, Format.JUNIT, Format.SARIF} == CHECK_FORMATS


def test_render_options_defaults_and_frozen() -> None:
    opts = RenderOptions()
    assert (opts.color, opts.width, opts.gate, opts.histogram) == (False, None, None, "auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.width = 80  # type: ignore[misc]
    assert HISTOGRAM_CHOICES == ("auto", "all", "violating", "none")
    assert HISTOGRAM_AUTO_LAYERS == 8


def test_unsupported_result_is_a_type_error() -> None:
    assert issubclass(UnsupportedResult, TypeError)


@pytest.mark.parametrize(
    ("isatty", "no_color", "force_color", "wanted"),
    [
        (True, None, None, True),
        (False, None, None, False),
        (True, "1", None, False),
        (True, "", None, True),  # an empty NO_COLOR is unset
        (False, None, "1", True),  # CI logs
        (False, None, "", False),  # an empty FORCE_COLOR is unset
        (False, "1", "1", False),  # the opt-out wins
        (True, "1", "1", False),
    ],
)
def test_color_wanted(
    monkeypatch: pytest.MonkeyPatch,
    isatty: bool,
    no_color: str | None,
    force_color: str | None,
    wanted: bool,
) -> None:
    for var, value in (("NO_COLOR", no_color), ("FORCE_COLOR", force_color)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    assert color_wanted(isatty) is wanted
    assert color_forced() is (bool(force_color) and not no_color)
