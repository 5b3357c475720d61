"""rmsnorm_eps.compare.spec: SPEC text -> EpsSpec; every key, the defaults, and the refusals
(one line naming the option and the text)."""

from __future__ import annotations

import pytest

from rmsnorm_eps.compare.spec import CONFIG_SPEC, EpsSpec, is_config_spec, parse_spec
from rmsnorm_eps.errors import RmsnormEpsError


def test_defaults_and_keys() -> None:
    s = parse_spec("eps=1e-6", "--from")
    assert isinstance(s, EpsSpec)
    assert (s.eps, s.placement, s.dim, s.dtype) == (1e-6, "inside", None, "float64")
    s = parse_spec("eps=1e-5,placement=sum,dim=4", "--to")
    assert (s.eps, s.placement, s.dim) == (1e-5, "sum", 4)
    assert parse_spec("eps=1e-5,dtype=float16", "--to").dtype == "float16"
    assert parse_spec("eps=1e-6,placement=outside", "--to").text == "eps=1e-6,placement=outside"


@pytest.mark.parametrize(
    "text", ["", "eps=0", "eps=-1e-6", "eps=nan", "eps=1e-6,placement=nowhere", "eps=1e-6,x=1"]
)
def test_refusals_name_the_option(text: str) -> None:
    with pytest.raises(RmsnormEpsError) as exc:
        parse_spec(text, "--from")
    assert "--from" in str(exc.value) and "\n" not in str(exc.value)


def test_config_spec() -> None:
    assert is_config_spec(CONFIG_SPEC) and not is_config_spec("eps=1e-6")


def test_an_eps_its_dtype_stores_as_0_or_inf_is_a_finding() -> None:
    s = parse_spec("eps=1e-8,dtype=float16", "--to")
    assert s.eps == 1e-8 and s.stored_eps == 0.0
    assert s.note is not None and s.note.startswith("eps=1e-08 is 0 in float16")
    assert "0/0 = NaN" in s.note and s.describe() == "eps=1e-08 (0 in float16) inside float16"
    big = parse_spec("eps=1e5,dtype=fp16", "--to")
    assert big.stored_eps == float("inf") and big.note is not None
    assert big.note.startswith("eps=100000 is inf in float16")
    # representable (rounded, not vanished): no note, the stored value kept apart from eps
    s = parse_spec("eps=1e-5,dtype=float16", "--to")
    assert s.note is None and s.stored_eps == 1.0013580322265625e-05
    assert parse_spec("eps=1e-8", "--to").stored_eps == 1e-8  # float64: exact
    assert parse_spec("eps=1e-8,dtype=float32", "--to").note is None
