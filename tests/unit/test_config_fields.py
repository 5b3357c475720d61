"""rmsnorm_eps.config.fields: one setting's raw value, validated; every refusal names the file
and key."""

from __future__ import annotations

import math

import pytest

from rmsnorm_eps.config.fields import parse_dim, parse_eps, parse_setting, shorten
from rmsnorm_eps.config.model import PLACEMENTS
from rmsnorm_eps.errors import InputFileError


@pytest.mark.parametrize(
    ("raw", "want"), [(1e-6, 1e-6), ("1e-6", 1e-6), (3, 3.0), ("2.5e-3", 2.5e-3)]
)
def test_eps_accepts_positive_finite_numbers(raw: object, want: float) -> None:
    got = parse_eps(raw, "c.yaml", "defaults.eps")
    assert got == want and isinstance(got, float)


@pytest.mark.parametrize("raw", [0, -1e-6, math.nan, math.inf, "x", True, None, [1e-6]])
def test_eps_refusals_name_file_and_key(raw: object) -> None:
    with pytest.raises(InputFileError) as exc:
        parse_eps(raw, "c.yaml", "defaults.eps")
    assert str(exc.value).startswith("c.yaml [defaults.eps]: ")


def test_dim_is_a_positive_integer() -> None:
    assert parse_dim(576, "p", "k") == 576 and parse_dim("128", "p", "k") == 128
    for bad in (0, -3, 1.5, True, "x"):
        with pytest.raises(InputFileError, match=r"p \[k\]"):
            parse_dim(bad, "p", "k")


def test_closed_choices() -> None:
    for placement in PLACEMENTS:
        assert parse_setting("placement", placement, "p", "k") == placement
    with pytest.raises(InputFileError, match="expected one of inside"):
        parse_setting("placement", "weird", "p", "k")
    assert parse_setting("eps", "1e-5", "p", "k") == 1e-5


def test_shorten_cuts_in_the_middle() -> None:
    assert shorten("abc", 10) == "abc"
    long = "a" * 50 + "b" * 50
    assert shorten(long, 20) == "a" * 10 + "...(80 characters)..." + "b" * 10
