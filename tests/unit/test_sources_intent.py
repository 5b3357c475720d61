"""sources/intent.py: readings that would answer another question, decided from the headers.

``check_dtype_applies`` on the sources of real dumps (opened by ``open_sources`` without the
option, then asked about it): refused when no layer is read as bfloat16, naming the file, the
first member and its dtype; accepted when one is. ``shape_warnings``: the last axis a multiple
of 64 (and one short of it) without ``raw``, a 1-D array with ``raw``; names escaped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources
from rmsnorm_eps.sources.intent import (
    WIDTH_STEP,
    InputWarning,
    check_dtype_applies,
    shape_warnings,
)


def test_a_dtype_no_layer_is_read_as_is_refused_naming_the_first_member(
    write_npz: Callable[..., Path],
) -> None:
    path = write_npz(a=np.ones(3, np.float32), b=np.ones(3, np.float64))
    sources = list(open_sources(path).sources)
    with pytest.raises(InputFileError) as info:
        check_dtype_applies(path, sources, "bfloat16")
    err = info.value
    assert err.path == str(path) and err.key == "a"
    assert err.problem.startswith("--dtype bfloat16 does not apply to float32 data (nor to any")
    assert err.problem.endswith("drop --dtype")
    # one array: no "other member" clause
    with pytest.raises(InputFileError) as one:
        check_dtype_applies(path, sources[1:], "bfloat16")
    assert "float64 data: it reads" in one.value.problem and one.value.key == "b"


def test_a_dtype_that_applies_to_one_member_or_no_dtype_passes(
    write_npz: Callable[..., Path],
) -> None:
    path = write_npz(bits=np.array([0x3F80, 0x4000], np.uint16), f=np.ones(2, np.float32))
    sources = list(open_sources(path, dtype="bfloat16").sources)
    assert [s.stored_as for s in sources] == ["bfloat16", None]
    check_dtype_applies(path, sources, "bfloat16")  # the mixed dump is read as documented
    check_dtype_applies(path, sources, None)
    check_dtype_applies(path, [], "bfloat16")  # nothing to say of no source


def _src(shape: tuple[int, ...], key: str | None = "k") -> SimpleNamespace:
    return SimpleNamespace(path=Path("d.npz"), key=key, shape=shape)


def test_shape_warnings_for_q_arrays_shaped_like_activations() -> None:
    shapes = [(4, WIDTH_STEP), (2, 3, 2 * WIDTH_STEP), (4, WIDTH_STEP - 1), (WIDTH_STEP,), (4, 0)]
    found = shape_warnings([_src(s, f"m{i}") for i, s in enumerate(shapes)], raw=False)
    assert [w.key for w in found] == ["m0", "m1"]
    assert found[0].problem.startswith("shape (4, 64) looks like x**2 per element (last axis 64")
    assert "(2, 3, 128)" in found[1].problem and found[0].path == "d.npz"
    # with raw the same shapes are activations: no warning
    assert shape_warnings([_src(s) for s in shapes if len(s) >= 2], raw=True) == ()


def test_shape_warnings_for_a_one_dimensional_raw_array() -> None:
    (w,) = shape_warnings([_src((7,), None), _src((7, 3))], raw=True)
    assert w.key is None
    assert w.problem.startswith("--raw on a 1-D array treats it as one vector of 7 elements")
    assert w.message == f"d.npz: {w.problem}"


def test_the_message_escapes_names_from_the_input() -> None:
    w = InputWarning("a\nb.npz", "x\x1b[31m", "bad shape")
    assert w.message == "a\\x0ab.npz [x\\x1b[31m]: bad shape"
