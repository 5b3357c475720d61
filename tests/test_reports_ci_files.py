"""The CI integration files: the pre-commit hook and the GitHub Actions example really work."""

from __future__ import annotations

import json
import shlex
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"


def test_pre_commit_hook_definition(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text("utf-8"))
    assert [h["id"] for h in hooks] == ["rmsnorm-eps-ratio"]
    hook = hooks[0]
    assert hook["entry"] == "rmsnorm-eps ratio" and hook["language"] == "python"
    assert hook["pass_filenames"] is False
    # what pre-commit runs: entry + args from the user's config (as in docs/reports.md)
    monkeypatch.chdir(ROOT)
    args = ["--eps", "1e-5", "--q-file", "examples/ci/q_dump.npz"]
    res = cli(*hook["entry"].split()[1:], *args)
    assert res.exit_code == 1  # the example has violations: the commit is refused
    res = cli(*hook["entry"].split()[1:], *args, "--max-violations", "9")
    assert res.exit_code == 0


def _steps() -> list[dict[str, Any]]:
    doc = yaml.safe_load(WORKFLOW.read_text("utf-8"))
    job = doc["jobs"]["eps-bound"]
    steps: list[dict[str, Any]] = job["steps"]
    for step in steps:
        step["_env"] = job["env"]
    return steps


def _commands(step: dict[str, Any]) -> list[list[str]]:
    out = []
    for line in step.get("run", "").replace("\\\n", " ").splitlines():
        if line.strip().startswith("rmsnorm-eps "):
            for key, value in step["_env"].items():
                line = line.replace(f'"${key}"', shlex.quote(str(value)))
            out.append(shlex.split(line)[1:])
    return out


def test_workflow_runs_as_documented(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    steps = {s.get("name", s.get("uses", "")): s for s in _steps()}
    dump = steps["Install rmsnorm-eps"]["_env"]["DUMP"]
    (tmp_path / dump).parent.mkdir(parents=True)
    shutil.copy(ROOT / dump, tmp_path / dump)
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    assert not any(name.startswith("Reports") for name in steps)  # the dump is read once
    gate = _commands(steps["Gate (annotations, reports, job summary, plot; exit 1 on violations)"])
    assert len(gate) == 1
    res = cli(*gate[0], env=env)
    assert res.exit_code == 1  # the documented example fails on its 9 violations
    assert res.stdout.count("::error ") == 2
    assert summary.read_text("utf-8").startswith("### FAIL: rmsnorm-eps ratio")
    upload = steps["Upload the reports"]
    assert upload["if"] == "always()"
    for name in upload["with"]["path"].split():
        assert (tmp_path / name).is_file(), name
    assert (
        json.loads((tmp_path / "rmsnorm-eps.json").read_text("utf-8"))["summary"]["violations"] == 9
    )
    assert ET.parse(tmp_path / "rmsnorm-eps.junit.xml").getroot().get("failures") == "2"


def test_example_dump_is_what_its_script_writes() -> None:
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location(
        "make_q_dump", ROOT / "examples/ci/make_q_dump.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.q_arrays()
    with np.load(ROOT / "examples/ci/q_dump.npz", allow_pickle=False) as shipped:
        assert sorted(shipped.files) == sorted(expected)
        for name, array in expected.items():
            np.testing.assert_array_equal(shipped[name], array)
            assert shipped[name].dtype == np.float32


def test_docs_workflow_block_is_the_shipped_file() -> None:
    """docs/reports.md's GitHub Actions block is the shipped workflow's gate and upload steps,
    verbatim: one step reads the dump once and writes every report (no --exit-zero step)."""
    docs = (ROOT / "docs" / "reports.md").read_text("utf-8")
    section = docs.split("## GitHub Actions", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    shipped = WORKFLOW.read_text("utf-8")
    assert block in shipped
    shown = yaml.safe_load(block)
    wanted = [
        {k: v for k, v in step.items() if k != "_env"}
        for step in _steps()
        if "rmsnorm-eps ratio" in step.get("run", "") or "upload-artifact" in step.get("uses", "")
    ]
    assert shown == wanted and len(shown) == 2
