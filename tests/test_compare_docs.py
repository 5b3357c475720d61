"""Every command shown in docs/readme/compare.md prints exactly what the doc shows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.compare_fixture import write_q_dump

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "compare.md"
BLOCK = re.compile(r"```console\n\$ rmsnorm-eps (.*?)\n(.*?)```", re.S)
BLOCKS = BLOCK.findall(DOC.read_text(encoding="utf-8"))


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def test_doc_has_examples() -> None:
    assert len(BLOCKS) == 4


@pytest.mark.parametrize(("command", "expected"), BLOCKS, ids=[b[0][:40] for b in BLOCKS])
def test_doc_example(cli, tmp_path: Path, monkeypatch, command: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "examples").mkdir()
    write_q_dump(tmp_path / "examples" / "q_dump.npz")
    monkeypatch.chdir(tmp_path)
    r = cli(*shlex.split(command))
    assert _norm(r.stdout + r.stderr) == _norm(expected)
