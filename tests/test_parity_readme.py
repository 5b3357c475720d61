"""The walkthrough in docs/readme/parity.md: every command is rerun and its output compared.

Counts, verdicts and text must match exactly; a displayed float may differ by 2% (and, in a
category row that passes, where errors are float32 rounding, both may just be below 1e-5)
because torch's CPU kernels may round differently on another machine.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "parity.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def _tokens_match(got: str, want: str) -> bool:
    if got == want:
        return True
    a, b = got.split(), want.split()
    if len(a) != len(b):
        return False
    rounding_row = b[-1] == "pass"
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x.rstrip(",;")), float(y.rstrip(",;"))
        except ValueError:
            return False
        tiny = rounding_row and abs(fx) < 1e-5 and abs(fy) < 1e-5
        if not (abs(fx - fy) <= 0.02 * abs(fy) or tiny):
            return False
    return True


def _assert_lines(got_text: str, want_text: str) -> None:
    got = [line.rstrip() for line in got_text.splitlines() if line.strip()]
    want = [line.rstrip() for line in want_text.splitlines() if line.strip()]
    assert len(got) == len(want), "\n".join(got)
    for g, w in zip(got, want, strict=True):
        assert _tokens_match(g, w), f"\n got: {g}\nwant: {w}"


def _commands(block: str) -> list[tuple[str, str]]:
    """(command, expected output) pairs of a console block."""
    pairs: list[tuple[str, str]] = []
    for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
        command, _, output = chunk.partition("\n")
        pairs.append((command, output))
    return pairs


def test_readme_walkthrough(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    probe_block, parity_block, fixed_block = _blocks("console")
    script = _blocks("python")[0]

    ((command, want),) = _commands(probe_block)
    res = cli(*shlex.split(command)[1:])
    assert res.exit_code == 0
    _assert_lines(res.stdout + res.stderr, want)

    for argv in (["run_torch.py", "None", "out.npy"], ["run_torch.py", "1e-6", "out_fixed.npy"]):
        monkeypatch.setattr(sys, "argv", argv)
        exec(compile(script, "run_torch.py", "exec"), {"__name__": "__main__"})

    for block in (parity_block, fixed_block):
        (command, want), (echo, code) = _commands(block)
        assert echo == "echo $?"
        args = shlex.split(command.replace("> /dev/null", ""))[1:]
        res = cli(*args)
        assert res.exit_code == int(code)
        _assert_lines(res.stderr if "/dev/null" in command else res.stdout + res.stderr, want)

    record_head = _blocks("markdown")[0]
    record = (tmp_path / "parity.md").read_text(encoding="utf-8").splitlines()
    _assert_lines("\n".join(record[: len(record_head.splitlines())]), record_head)


def test_readme_api_example():
    code, output = _blocks("python")[1], _blocks("text")[0]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "api_example.py", "exec"), {"__name__": "__main__"})
    _assert_lines(buf.getvalue(), output)
