"""rmsnorm_eps.errors: one hierarchy (exit 2 for all), messages that name file and key, and a
brief repr bounded whatever the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_eps.errors import (
    ConfigError,
    InputFileError,
    InvalidParameterError,
    MissingExtraError,
    RmsnormEpsError,
    brief,
)


@pytest.mark.parametrize(
    "cls", [InvalidParameterError, InputFileError, ConfigError, MissingExtraError]
)
def test_every_error_is_an_rmsnorm_eps_error(cls: type) -> None:
    assert issubclass(cls, RmsnormEpsError) and issubclass(cls, Exception)


def test_input_file_error_names_file_and_key() -> None:
    e = InputFileError(Path("d/q.npz"), "truncated", key="model.norm")
    assert (str(e.path), e.problem, e.key) == ("d/q.npz", "truncated", "model.norm")
    assert str(e) == "d/q.npz [model.norm]: truncated"
    assert str(InputFileError("q.npy", "empty file")) == "q.npy: empty file"


@pytest.mark.parametrize("value", ["x" * 10_000, list(range(5_000)), b"\x00" * 999, None, 1e-6])
def test_brief_is_bounded(value: object) -> None:
    shown = brief(value)
    assert len(shown) <= 100 and "\n" not in shown
    if len(repr(value)) <= 60:
        assert shown == repr(value)
