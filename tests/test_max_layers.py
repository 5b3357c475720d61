"""The cap on layers per dump (``--max-layers``, default 4,096) and on layer patterns per YAML
config (4,096), refused with one line and exit 2 before any array data is read (issue 20)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps import analysis
from rmsnorm_eps.config import load_config
from rmsnorm_eps.config.yaml_reader import MAX_YAML_PATTERNS
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import MAX_LAYERS
from tests.conftest import Result, write_many_npz


@pytest.fixture(scope="module")
def over_cap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,097 one-value layers (one more than the cap) and one companion."""
    path = tmp_path_factory.mktemp("cap") / "q.npz"
    arrays = {f"l{i}": np.array([1.0]) for i in range(MAX_LAYERS + 1)}
    arrays["l0::position"] = np.array([0], np.int64)
    return write_many_npz(path, arrays)


def _one_line(res: Result) -> str:
    assert res.exit_code == 2, res
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_caps_are_4096() -> None:
    assert MAX_LAYERS == MAX_YAML_PATTERNS == 4096


@pytest.mark.parametrize(
    "args", [("ratio", "--eps", "1e-6"), ("compare", "--from", "eps=1e-6", "--to", "eps=1e-5")]
)
def test_a_dump_of_4097_layers_is_refused_by_default(
    cli: Callable[..., Result], over_cap: Path, args: tuple[str, ...]
) -> None:
    line = _one_line(cli(args[0], str(over_cap), *args[1:]))
    assert line == (
        f"rmsnorm-eps: error: {over_cap}: 4097 layers, more than --max-layers 4096 "
        "(raise it with --max-layers N)"
    )


def test_the_refusal_reads_no_array_data(over_cap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(analysis, "_analyze_layer", lambda src, *a: calls.append(src.name))
    with pytest.raises(InputFileError, match="4097 layers, more than --max-layers 4096"):
        analysis.analyze_dump(over_cap, 1e-6)
    assert calls == []


def test_max_layers_5000_accepts_it(cli: Callable[..., Result], over_cap: Path) -> None:
    """The whole text report: every layer's row, every member accounted for."""
    res = cli("ratio", str(over_cap), "--eps", "1e-6", "--max-layers", "5000")
    assert res.exit_code == 0, res.stderr
    rows = re.findall(r"^ (l\d+) +1e-06 ", res.stdout, flags=re.MULTILINE)
    assert rows == [f"l{i}" for i in range(MAX_LAYERS + 1)]
    assert "Members: 4097 layers (+1 companion) in the file, 4097 analysed" in res.stdout


def test_a_lower_cap_is_named_in_the_line(cli: Callable[..., Result], over_cap: Path) -> None:
    line = _one_line(cli("ratio", str(over_cap), "--eps", "1e-6", "--max-layers", "10"))
    assert line.endswith(": 4097 layers, more than --max-layers 10 (raise it with --max-layers N)")


def test_max_layers_must_be_positive(cli: Callable[..., Result], over_cap: Path) -> None:
    res = cli("ratio", str(over_cap), "--eps", "1e-6", "--max-layers", "0")
    assert res.exit_code == 2
    assert "--max-layers" in res.stderr


def _patterns_yaml(path: Path, n: int) -> Path:
    lines = ["schema_version: 1", "defaults: {eps: 1e-6}", "layers:"]
    lines += [f'  "model.layers.{i}.*": {{}}' for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_config_of_4097_patterns_is_refused(cli: Callable[..., Result], tmp_path: Path) -> None:
    path = _patterns_yaml(tmp_path / "big.yaml", MAX_YAML_PATTERNS + 1)
    line = _one_line(cli("config", "show", str(path)))
    assert line == (
        f"rmsnorm-eps: error: {path} [layers]: 4097 layer patterns, more than the 4096 a config "
        "may hold: refused (size cap)"
    )
    ok = load_config(_patterns_yaml(tmp_path / "ok.yaml", MAX_YAML_PATTERNS))
    assert len(ok.entries) == MAX_YAML_PATTERNS


def test_help_shows_the_option(cli: Callable[..., Result]) -> None:
    for command in ("ratio", "compare"):
        out = cli(command, "--help", env={"COLUMNS": "200"}).stdout
        assert "--max-layers" in out, command
