"""The README's quick start works on a fresh clone, exactly as written.

The repository is cloned (its committed HEAD, as a user gets it) into a temporary directory;
the README's quick-start line runs there with bash: a plain virtual environment, the README's
`pip install`, then the quick-start command, whose output must equal the README's console
block. Needs git and a package index for the core dependencies (typer, numpy, rich, PyYAML;
pip's cache makes reruns fast); skips when the checkout is not a git repository or no index
can be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from tests.helpers import console_blocks, console_commands

pytestmark = pytest.mark.slow

#: pip's words when no package index answers: the environment, not the README, is at fault.
OFFLINE = re.compile(
    r"Could not find a version|No matching distribution|Temporary failure in name resolution|"
    r"Failed to establish a new connection|Network is unreachable|ConnectionError"
)


def _quick_start() -> tuple[str, str, str]:
    """(install line, quick-start command, its output) from the README's Quick start section."""
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    bash = re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)
    assert len(bash) == 1, "the Quick start has one bash block"
    line = bash[0].strip()
    assert "\n" not in line
    *setup, command = line.split(" && ")
    lines = section.splitlines()
    shown = [
        pair for start, end in console_blocks(lines) for pair in console_commands(lines[start:end])
    ]
    assert len(shown) == 1 and shown[0][0] == command, "the console block shows the same command"
    return " && ".join(setup), command, shown[0][1]


def _git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == "true"


def test_quick_start_on_a_fresh_clone(tmp_path: Path) -> None:
    setup, command, expected = _quick_start()
    assert "pip install" in setup and "venv" in setup
    if not _git_checkout():
        pytest.skip("not a git checkout (or no git): nothing to clone")
    clone = tmp_path / "rmsnorm-eps"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"NO_COLOR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    installed = subprocess.run(
        ["bash", "-c", setup], cwd=clone, env=env, capture_output=True, text=True, check=False
    )
    if installed.returncode != 0 and OFFLINE.search(installed.stdout + installed.stderr):
        pytest.skip("no package index reachable for the core dependencies")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    tool = clone / ".venv" / "bin" / "rmsnorm-eps"
    assert tool.is_file(), "the README's install line gives the rmsnorm-eps command"
    run = subprocess.run(
        ["bash", "-c", f". .venv/bin/activate && {command}"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    output = "\n".join(line.rstrip() for line in (run.stdout + run.stderr).splitlines())
    assert output.strip("\n") == expected
    assert run.returncode == 1  # the README says: three inputs fall below the bound
