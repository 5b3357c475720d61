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
from rmsnorm_eps.sources import MAX_LAYERS, open_sources
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
    assert "Members: 4098 in the file, 4098 analysed" in res.stdout


def test_a_lower_cap_is_named_in_the_line(cli: Callable[..., Result], over_cap: Path) -> None:
    line = _one_line(cli("ratio", str(over_cap), "--eps", "1e-6", "--max-layers", "10"))
    assert line.endswith(": 4097 layers, more than --max-layers 10 (raise it with --max-layers N)")


def test_max_layers_must_be_positive(cli: Callable[..., Result], over_cap: Path) -> None:
    res = cli("ratio", str(over_cap), "--eps", "1e-6", "--max-layers", "0")
    assert res.exit_code == 2
    assert "--max-layers" in res.stderr


def test_companions_are_not_layers(tmp_path: Path) -> None:
    """Ten layers each with ::position and ::batch (30 members) are within a cap of 10."""
    arrays: dict[str, np.ndarray] = {}
    for i in range(10):
        arrays[f"l{i}"] = np.array([1.0])
        arrays[f"l{i}::position"] = np.array([0], np.int64)
        arrays[f"l{i}::batch"] = np.array([0], np.int64)
    path = write_many_npz(tmp_path / "c.npz", arrays)
    opened = open_sources(path, max_layers=10)
    assert len(opened.sources) == 10 and opened.members_total == 30
    assert all(src.members == 3 for src in opened.sources)
    with pytest.raises(InputFileError, match="10 layers, more than --max-layers 9"):
        open_sources(path, max_layers=9)


def test_unreadable_members_count_as_layers_companions_do_not(tmp_path: Path) -> None:
    """With ``lenient`` an unreadable layer is still a layer; an unreadable companion is not."""
    path = tmp_path / "u.npz"
    np.savez(
        path,
        a=np.array([1.0]),
        b=np.array(["text"]),  # not a float dtype: unreadable, a layer
        **{"c::position": np.array([0], np.int64)},  # type: ignore[arg-type]  # no layer c
    )
    opened = open_sources(path, lenient=True, max_layers=2)
    assert sorted(u.name for u in opened.unreadable) == ["b", "c::position"]
    with pytest.raises(InputFileError, match="2 layers, more than --max-layers 1"):
        open_sources(path, lenient=True, max_layers=1)


def test_csv_columns_are_layers(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text(",".join(f"c{i}" for i in range(5)) + "\n" + ",".join(["1"] * 5) + "\n")
    assert len(open_sources(path, max_layers=5).sources) == 5
    with pytest.raises(InputFileError, match="5 layers, more than --max-layers 4"):
        open_sources(path, max_layers=4)


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
