"""docs/parity.md is real: its console blocks are rerun (as tests/test_readme.py does for
README.md), its text blocks are compared with fresh runs, and the example files it uses are the
ones the documented commands produce.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from tests.helpers import console_blocks, console_commands, run_console

torch = pytest.importorskip("torch")

DOC = ROOT / "docs" / "parity.md"
EXAMPLES = ROOT / "examples" / "parity"


def _fenced(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def _clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def test_console_blocks_print_what_they_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    lines = DOC.read_text(encoding="utf-8").splitlines()
    ran = 0
    for start, end in console_blocks(lines):
        for cmd, shown in console_commands(lines[start:end]):
            if shown:  # a command shown without output writes a file: checked below
                assert run_console(cmd) == shown, cmd
                ran += 1
    assert ran == 2


def test_probe_output_and_example_file(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples" / "parity").mkdir(parents=True)
    command = "rmsnorm-eps probe --dim 64 --eps 1e-6 --save-data examples/parity/probes.npz"
    assert f"$ {command}" in DOC.read_text(encoding="utf-8")
    res = cli(*shlex.split(command)[1:])
    assert res.exit_code == 0
    assert _clean(res.stdout + res.stderr) == _clean(_fenced("text")[0])
    fresh = (tmp_path / "examples" / "parity" / "probes.npz").read_bytes()
    assert fresh == (EXAMPLES / "probes.npz").read_bytes()


@pytest.mark.parametrize(
    ("eps", "name"), [("None", "torch_eps_none.npy"), ("1e-6", "torch_eps_1e-6.npy")]
)
def test_example_outputs_come_from_the_script(tmp_path: Path, monkeypatch, eps, name):
    script = (EXAMPLES / "run_torch.py").read_text(encoding="utf-8")
    assert script in _fenced("python")[0]
    shutil.copy(EXAMPLES / "probes.npz", tmp_path / "probes.npz")
    monkeypatch.setattr(sys, "argv", ["run_torch.py", eps, str(tmp_path / name)])
    exec(compile(script, "run_torch.py", "exec"), {"__name__": "__main__"})
    fresh = np.load(tmp_path / name, allow_pickle=False)
    committed = np.load(EXAMPLES / name, allow_pickle=False)
    assert fresh.dtype == committed.dtype == np.float32
    np.testing.assert_allclose(fresh, committed, rtol=1e-6, atol=1e-12)


def test_record_head(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    record = tmp_path / "parity.md"
    res = cli(
        "parity",
        "--probes",
        "examples/parity/probes.npz",
        "--actual",
        "examples/parity/torch_eps_none.npy",
        "--record",
        str(record),
    )
    assert res.exit_code == 1
    head = _fenced("markdown")[0]
    got = record.read_text(encoding="utf-8").splitlines()[: len(head.splitlines())]
    assert _clean("\n".join(got)) == _clean(head)


def _tokens_match(got: str, want: str) -> bool:
    """Equal, or equal but for numbers within 2% (torch's CPU kernels vary by machine)."""
    a, b = got.split(), want.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x.rstrip("%")), float(y.rstrip("%"))
        except ValueError:
            return False
        if abs(fx - fy) > 0.02 * abs(fy):
            return False
    return True


def test_api_example():
    code, output = _fenced("python")[1], _fenced("text")[1]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "api_example.py", "exec"), {"__name__": "__main__"})
    got, want = _clean(buf.getvalue()).splitlines(), _clean(output).splitlines()
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert _tokens_match(g, w), f"\n got: {g}\nwant: {w}"
