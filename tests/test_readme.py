"""Every ```console block in README.md and docs/*.md is re-run and must print what it shows.

Python blocks: those of README.md, docs/commands.md and docs/numerics.md run (the README capture
examples on a tiny seeded Llama standing in for "your model"); every other one compiles.

A block holds one or more ``$ rmsnorm-eps ...`` lines, each followed by its output (stdout,
then stderr). Lines are compared with trailing spaces removed. A command shown without output
is an illustration (it writes a file; its output is checked elsewhere, e.g. against golden
files) and is not run. To refresh the blocks after a deliberate change of output:
``RMSNORM_EPS_UPDATE_README=1 python -m pytest tests/test_readme.py`` (then review the diff).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from rmsnorm_eps.cli import app
from tests.helpers import console_blocks, console_commands, run_console

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_console_blocks(doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks = console_blocks(lines)
    if doc.name == "README.md":
        assert blocks, "README has no console blocks"
    update = os.environ.get("RMSNORM_EPS_UPDATE_README") == "1"
    new_lines = list(lines)
    mismatches = []
    for start, end in reversed(blocks):
        body = lines[start:end]
        rendered: list[str] = []
        for cmd, shown in console_commands(body):
            if not shown:
                rendered.append(f"$ {cmd}")
                continue
            actual = run_console(cmd)
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


#: Names a Python example may use without defining them: "your model and your token batch".
MODEL_NAMES = ("model", "ids", "mask")
#: Docs whose self-contained Python examples run as shown (their asserts hold).
RUN_PYTHON = ["README.md", "docs/commands.md", "docs/numerics.md"]


def _needs_model(code: str) -> bool:
    return "model(" in code and "model =" not in code


def _tiny_model() -> dict[str, object]:
    """A seeded two-layer Llama and a right-padded batch: what `model`, `ids`, `mask` stand for."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.tensor([[1, 5, 9, 13, 17], [2, 6, 10, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    return {"model": model, "ids": ids, "mask": mask}


@pytest.mark.parametrize("doc", RUN_PYTHON)
def test_python_blocks_run(doc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The self-contained Python examples run as shown (their asserts hold)."""
    monkeypatch.chdir(ROOT)
    blocks = [c for c in _python_blocks((ROOT / doc).read_text("utf-8")) if not _needs_model(c)]
    assert blocks  # README.md: the in-memory check; its model examples: next test
    for code in blocks:
        exec(compile(code, doc, "exec"), {"__name__": "readme_example"})


@pytest.mark.slow
def test_readme_model_examples_write_a_dump_ratio_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's capture examples (QCapture, plain hook + np.savez) run on a tiny Llama, and
    `ratio` reads the q.npz each one writes: the model's five RMSNorm modules, 8 real tokens
    each for QCapture (padding excluded), all 10 for the plain hook."""
    readme = (ROOT / "README.md").read_text("utf-8")
    blocks = [c for c in _python_blocks(readme) if _needs_model(c)]
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    for code, tokens in zip(blocks, (8, 10)):
        namespace = {"__name__": "readme_example", **_tiny_model()}
        exec(compile(code, "README.md", "exec"), namespace)
        res = CliRunner().invoke(app, ["ratio", "q.npz", "--eps", "1e-5", "--format", "json"])
        assert res.exit_code in (0, 1), res.output
        layers = json.loads(res.stdout)["layers"]
        assert {ly["name"] for ly in layers} == {
            "model.layers.0.input_layernorm",
            "model.layers.0.post_attention_layernorm",
            "model.layers.1.input_layernorm",
            "model.layers.1.post_attention_layernorm",
            "model.norm",
        }
        assert {ly["count"] for ly in layers} == {tokens}
        (tmp_path / "q.npz").unlink()


def test_python_blocks_in_docs_compile() -> None:
    """Examples that need a model or data we do not ship are at least valid Python."""
    for doc in DOCS:
        for code in _python_blocks(doc.read_text("utf-8")):
            compile(code, doc.name, "exec")


def test_readme_picture_is_the_commands_own_and_small(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's picture is drawn by the command its caption names, and stays small."""
    pytest.importorskip("matplotlib")
    text = (ROOT / "README.md").read_text("utf-8")
    image = re.search(r"!\[[^\]]*\]\((docs/[\w-]+\.png)\)", text)
    assert image, "README has no picture"
    committed = (ROOT / image[1]).read_bytes()
    assert len(committed) < 100_000
    command = re.search(rf"`(rmsnorm-eps [^`]*--plot {re.escape(image[1])}[^`]*)`", text)
    assert command, "README does not say how its picture is drawn"
    argv = shlex.split(command[1].replace(image[1], str(tmp_path / "p.png")))
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(app, [*argv[1:], "--format", "json"])
    assert res.exit_code == 1  # the example dump has violations
    fresh = (tmp_path / "p.png").read_bytes()
    assert fresh[:8] == committed[:8] == b"\x89PNG\r\n\x1a\n"
    assert fresh[16:24] == committed[16:24]  # width and height


def test_run_the_tests_is_what_ci_runs() -> None:
    """README "Run the tests" installs exactly what .ci/run installs, in the same order."""
    readme = (ROOT / "README.md").read_text("utf-8")
    section = readme.split("\n## Run the tests", 1)[1].split("\n## ", 1)[0]
    line = re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)[0].strip()
    readme_steps = [s for s in line.split(" && ") if s.startswith("pip install")]
    ci = (ROOT / ".ci" / "run").read_text("utf-8").split('"Run the tests" (keep in sync)', 1)[1]
    ci_steps = [
        " ".join(w for w in s.split() if w != "-q").replace("python -m pip", "pip")
        for s in ci.split("\n# ---", 1)[0].splitlines()
        if s.startswith("python -m pip install")
    ]
    assert readme_steps == ci_steps
    assert line.endswith("&& python -m pytest")
    assert "\npython -m pytest" in ci or "python -m pytest ||" in ci


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text("utf-8"), flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.*)$", text, flags=re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    """Every relative link (file, and #anchor where given) in README.md and docs/ resolves."""
    text = re.sub(r"```.*?```", "", doc.read_text("utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        exists = file.exists()
        missing_anchor = exists and bool(anchor) and file.suffix == ".md"
        if not exists or (missing_anchor and anchor not in _anchors(file)):
            broken.append(target)
    assert broken == []
