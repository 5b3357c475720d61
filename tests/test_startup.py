"""Start-up: `--help` and `bound` must not pay for numpy, yaml or rich tables they do not use."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmsnorm_eps import numerics, scalar

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys, runpy, io, contextlib
sys.argv = ["rmsnorm-eps", *{args!r}]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("rmsnorm_eps", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
print(code, " ".join(m for m in ("numpy", "yaml", "rich.table", "torch") if m in sys.modules))
"""


def _imports(*args: str) -> tuple[str, set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    ).stdout.split()
    return out[0], set(out[1:])


def test_help_imports_no_numpy_yaml_or_rich_table() -> None:
    code, mods = _imports("--help")
    assert code == "0"
    assert mods == set()


@pytest.mark.parametrize("command", ["ratio", "merge", "bound"])
def test_command_help_is_light(command: str) -> None:
    # typer < 0.20 renders each option's "[default: ...]" through rich (rich.table comes with
    # it), so a command's own help may load rich; it must never load numpy, yaml or torch.
    code, mods = _imports(command, "--help")
    assert code == "0" and mods <= {"rich.table"}


def test_bound_does_not_import_numpy() -> None:
    code, mods = _imports("bound", "--delta", "0.01")
    assert code == "0"
    assert "numpy" not in mods and "yaml" not in mods


@given(st.floats(min_value=1e-300, max_value=1.0, exclude_max=True))
def test_scalar_min_ratio_is_bitwise_numerics(delta: float) -> None:
    assert scalar.min_ratio(delta) == float(numerics.min_ratio(delta))


@given(st.one_of(st.floats(min_value=0.0, max_value=1e308), st.just(math.inf)))
def test_scalar_attenuation_is_bitwise_numerics(r: float) -> None:
    with np.errstate(over="ignore"):  # numerics evaluates both branches of A(r)
        assert scalar.attenuation(r) == float(numerics.attenuation(r))
        assert scalar.attenuation_loss(r) == float(numerics.attenuation_loss(r))


@pytest.mark.parametrize("bad", ["x", math.nan, -1.0, True])
def test_scalar_validation_matches_numerics(bad: object) -> None:
    for fn in ("validate_eps", "validate_delta", "validate_ratio"):
        with pytest.raises(Exception) as ours:
            getattr(scalar, fn)(bad)
        with pytest.raises(Exception) as theirs:
            getattr(numerics, fn)(bad)
        assert str(ours.value) == str(theirs.value)
