"""The ONNX audit examples of docs/configs.md, README.md and docs/parity.md are real output:
each ```text block after a ``<!-- onnx-example: COMMAND -->`` marker is what COMMAND prints,
run in the directory of the exported tiny models (tests/onnx_fixture.py). Refresh after a
deliberate change with ``RMSNORM_EPS_UPDATE_README=1 python -m pytest tests/test_onnx_docs.py``."""

from __future__ import annotations

import os
import re
import shlex

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import onnx_fixture as fx
from conftest import ROOT
from typer.testing import CliRunner

from rmsnorm_eps.cli import app

DOCS = [ROOT / "docs" / "configs.md", ROOT / "README.md", ROOT / "docs" / "parity.md"]
_MARK = re.compile(r"^<!-- onnx-example: (.+) -->$")


def _run(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] == "rmsnorm-eps", command
    res = CliRunner().invoke(app, argv[1:], env={"NO_COLOR": "1", "RMSNORM_EPS_FORMAT": ""})
    text = res.stdout + res.stderr
    body = "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")
    return f"$ {command}\n{body}\n(exit {res.exit_code})"


@pytest.mark.slow
def test_onnx_examples_are_real_output(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path_factory.getbasetemp() / "onnx-exports"
    fx.exports(base)
    monkeypatch.chdir(base)
    update = os.environ.get("RMSNORM_EPS_UPDATE_README") == "1"
    found = 0
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        out: list[str] = []
        i = 0
        while i < len(lines):
            out.append(lines[i])
            mark = _MARK.match(lines[i])
            if mark and i + 1 < len(lines) and lines[i + 1] == "```text":
                end = lines.index("```", i + 2)
                shown = "\n".join(lines[i + 2 : end])
                actual = _run(mark.group(1))
                found += 1
                if not update:
                    assert shown == actual, f"{doc.name}: {mark.group(1)}"
                out += ["```text", *actual.splitlines(), "```"]
                i = end + 1
                continue
            i += 1
        if update:
            doc.write_text("\n".join(out) + "\n", encoding="utf-8")
    assert found >= 4
