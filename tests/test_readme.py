"""Every ```console block in README.md and docs/*.md is re-run and must print what it shows.

A block holds one or more ``$ rmsnorm-eps ...`` lines, each followed by its output (stdout,
then stderr). Lines are compared with trailing spaces removed. A command shown without output
is an illustration (it writes a file; its output is checked elsewhere, e.g. against golden
files) and is not run. To refresh the blocks after a deliberate change of output:
``RMSNORM_EPS_UPDATE_README=1 python -m pytest tests/test_readme.py`` (then review the diff).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from rmsnorm_eps.cli import app

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line indices of the bodies of ```console blocks."""
    out, start = [], None
    for i, line in enumerate(lines):
        if start is None and line.strip() == "```console":
            start = i + 1
        elif start is not None and line.strip() == "```":
            out.append((start, i))
            start = None
    return out


def _run(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] == "rmsnorm-eps", command
    res = CliRunner().invoke(app, argv[1:], env={"NO_COLOR": "1", "RMSNORM_EPS_FORMAT": ""})
    text = res.stdout + res.stderr
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def _commands(body: list[str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, list[str]]] = []
    for line in body:
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line.rstrip())
    return [(cmd, "\n".join(out).strip("\n")) for cmd, out in pairs]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_console_blocks(doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks = _blocks(lines)
    if doc.name == "README.md":
        assert blocks, "README has no console blocks"
    update = os.environ.get("RMSNORM_EPS_UPDATE_README") == "1"
    new_lines = list(lines)
    mismatches = []
    for start, end in reversed(blocks):
        body = lines[start:end]
        rendered: list[str] = []
        for cmd, shown in _commands(body):
            if not shown:
                rendered.append(f"$ {cmd}")
                continue
            actual = _run(cmd)
            if actual != shown:
                mismatches.append(f"$ {cmd}\n--- README\n{shown}\n--- actual\n{actual}")
            rendered += [f"$ {cmd}", *actual.splitlines()]
        new_lines[start:end] = rendered
    if update:
        doc.write_text("\n".join(new_lines) + "\n", encoding="utf-8")
        return
    assert not mismatches, "\n\n".join(mismatches)


def _python_blocks(text: str) -> list[str]:
    lines = text.splitlines()
    out, start = [], None
    for i, line in enumerate(lines):
        if start is None and line.strip() == "```python":
            start = i + 1
        elif start is not None and line.strip() == "```":
            out.append("\n".join(lines[start:i]))
            start = None
    return out


def test_readme_python_blocks_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python examples run as shown (their asserts hold)."""
    monkeypatch.chdir(ROOT)
    blocks = _python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
