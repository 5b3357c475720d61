"""Reading output as the GitHub Actions runner does: shared by the hostile-name tests.

The runner executes ``::name args::data`` when it starts a line (after whitespace) and
``##[name args]data`` anywhere in a line, on stdout and stderr; Azure Pipelines reads
``##vso[``. :func:`runner_commands` finds them in one line; :func:`assert_inert` checks a
whole run (and :func:`assert_file_inert` a written file).
"""

from __future__ import annotations

import re
from pathlib import Path

from rmsnorm_eps import escape

__all__ = ["ANNOTATION", "CONTROL", "assert_file_inert", "assert_inert", "runner_commands"]

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\ud800-\udfff]")
ANNOTATION = re.compile(r"^::(error|warning) title=[^:]*(,file=[^:]*)?::[^\r\n]*$")


def runner_commands(line: str) -> list[str]:
    """What the Actions runner (and Azure Pipelines) would execute in one output line:
    ``::name`` at the line start after whitespace, ``##[name`` or ``##vso[`` anywhere."""
    found = []
    if line.lstrip().startswith("::"):
        found.append(line)
    if "##[" in line or "##vso[" in line:
        found.append(line)
    return found


def assert_inert(out: str, err: str, fmt: str) -> None:
    """No command but the tool's own annotations; no raw control character anywhere."""
    assert "\r" not in out and "\r" not in err
    for line in err.splitlines():
        assert runner_commands(line) == [], line[:300]
        assert line.startswith("rmsnorm-eps: "), line[:300]
        assert len(line) < 2 * escape.LINE_LIMIT
    for line in out.splitlines():
        commands = runner_commands(line)
        if fmt == "github" and commands:
            assert commands == [line] and ANNOTATION.match(line), line[:300]
            assert "##" not in line
        else:
            assert commands == [], line[:300]
    assert not CONTROL.search(out) and not CONTROL.search(err)


def assert_file_inert(path: Path) -> None:
    """A file written by the tool, ``cat`` in a CI step: no line is a command, no raw
    control character (tab and newline aside), valid UTF-8."""
    text = path.read_bytes().decode("utf-8")
    assert "\r" not in text
    for line in text.splitlines():
        assert runner_commands(line) == [], line[:300]
    assert not CONTROL.search(text.replace("\t", " ")), repr(CONTROL.search(text))
