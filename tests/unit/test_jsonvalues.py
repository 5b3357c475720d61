"""jsonvalues.py: ``jnum`` turns every float into something ``json.dumps(allow_nan=False)``
accepts (finite numbers unchanged, nan/inf as strings, None as null) and ``head`` names the
schema, tool, package version and command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rmsnorm_eps._version import __version__
from rmsnorm_eps.jsonvalues import SCHEMA_VERSION, head, jnum


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, None),
        (0.0, 0.0),
        (-2.5, -2.5),
        (5e-324, 5e-324),
        (float("nan"), "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (np.float32(0.1), float(np.float32(0.1))),
        (np.float64(np.inf), "inf"),
        (3, 3.0),
    ],
)
def test_jnum(value: float | None, want: object) -> None:
    got = jnum(value)
    assert got == want and type(got) is type(want)
    json.dumps(got, allow_nan=False)  # valid strict JSON


def test_head() -> None:
    doc = head("ratio")
    assert doc == {
        "schema_version": SCHEMA_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "command": "ratio",
    }
    assert SCHEMA_VERSION == 1
    assert list(doc) == ["schema_version", "tool", "version", "command"]
    assert head("ratio") is not doc  # a fresh dict each time: callers extend it
