"""Golden files: the exact output of every format for every command that reports findings
(ratio, bound, compare, precision, parity, config diff, merge) on the shipped examples.

Regenerate after an intended change with ``RMSNORM_EPS_REGEN_GOLDEN=1 python -m pytest
tests/test_reports_golden.py`` and review the diff (docs/DEVELOPING.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_eps.reports import FORMATS

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
REGEN = os.environ.get("RMSNORM_EPS_REGEN_GOLDEN", "") not in ("", "0")
EXT = {
    "text": "txt",
    "json": "json",
    "markdown": "md",
    "github": "github.txt",
    "junit": "junit.xml",
    "sarif": "sarif",
}

COMPARE = (
    "compare",
    "--q-file",
    "examples/q_dump.npz",
    "--from",
    "eps=1e-6",
    "--to",
    "eps=1e-5",
    "--top",
    "3",
)
PARITY = ("parity", "--probes", "examples/parity/probes.npz", "--actual")
CASES: dict[str, tuple[tuple[str, ...], int]] = {
    # name: (arguments, expected exit code)
    "ratio": (("ratio", "--eps", "1e-5", "--q-file", "examples/ci/q_dump.npz", "--top", "3"), 1),
    "ratio-budget": (
        (
            "ratio",
            "--eps",
            "1e-5",
            "--q-file",
            "examples/ci/q_dump.npz",
            "--top",
            "3",
            "--max-violations",
            "10",
        ),
        0,
    ),
    "bound": (("bound", "--delta", "0.01", "--eps", "1e-5"), 0),
    "compare": (COMPARE, 1),
    "compare-budget": ((*COMPARE, "--max-violations", "2"), 0),
    "precision": (("precision", "--eps", "1e-8"), 1),
    "parity": ((*PARITY, "examples/parity/torch_eps_none.npy"), 1),
    "parity-pass": ((*PARITY, "examples/parity/torch_eps_1e-6.npy"), 0),
    "config-diff": (("config", "diff", "configs/llama-3-8b.yaml", "configs/qwen3-8b.yaml"), 1),
    # examples/ci/q_dump.npz in two shards (tests/data/merge/make_shards.py)
    "merge": (
        (
            "merge",
            "tests/data/merge/shard0.summary.json",
            "tests/data/merge/shard1.summary.json",
            "--top",
            "3",
        ),
        1,
    ),
}


def test_every_format_has_a_golden_extension() -> None:
    assert set(EXT) == set(FORMATS)


@pytest.mark.parametrize("fmt", sorted(EXT))
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, case: str, fmt: str
) -> None:
    monkeypatch.chdir(ROOT)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    args, code = CASES[case]
    res = cli(*args, "--format", fmt)
    assert res.exit_code == code, res
    path = GOLDEN / f"{case}.{EXT[fmt]}"
    if REGEN:
        path.write_text(res.stdout, encoding="utf-8")
    assert path.is_file(), f"missing {path}; run with RMSNORM_EPS_REGEN_GOLDEN=1"
    assert res.stdout == path.read_text(encoding="utf-8")
