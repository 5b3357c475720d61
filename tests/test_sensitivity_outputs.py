"""sensitivity's -o, --report and --summary never write into the --model folder a file a model
is loaded from (config.json, tokenizer.json, model.safetensors, ...): they used to overwrite
them (capture refused already). The check runs before the model is loaded: nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("-o", "config.json"),
        ("-o", "sub/tokenizer.json"),
        ("--report", "json=tokenizer.json"),
        ("--report", "sarif=model.safetensors"),
        ("--summary", "model.safetensors"),
    ],
)
def test_an_output_inside_the_model_folder_is_refused(
    cli: Callable[..., Any], tmp_path: Path, option: str, name: str
) -> None:
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (model / "model.safetensors").write_bytes(b"weights")
    link = tmp_path / "link"
    link.symlink_to(model)  # spelled through a symlink: still the model folder
    before = {p.name: p.read_bytes() for p in model.rglob("*") if p.is_file()}
    base = ("sensitivity", "--model", str(model), "--text", "hello", "--eps", "1e-5")
    env = None
    if option == "--summary":
        args: tuple[str, ...] = ("--summary",)
        env = {"GITHUB_STEP_SUMMARY": str(link / name)}
    elif option == "--report":
        fmt, _, file = name.partition("=")
        args = ("--report", f"{fmt}={link / file}")
    else:
        args = (option, str(link / name))
    r = cli(*base, *args, env=env)
    assert r.exit_code == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"lies inside the model folder --model {model}" in lines[0]
    assert {p.name: p.read_bytes() for p in model.rglob("*") if p.is_file()} == before


def test_a_report_beside_the_model_files_with_another_name_is_not_refused(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    """Only a model file's name is refused: a .md report in the folder goes on to the model
    load (which fails here on the bare config, a different error than the output check)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    r = cli(
        "sensitivity", "--model", str(model), "--text", "hi", "--eps", "1e-5",
        "-o", str(model / "report.md"),
    )  # fmt: skip
    assert "lies inside the model folder" not in r.stderr
