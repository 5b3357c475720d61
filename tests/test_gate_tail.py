"""One gate tail: ratio, compare, merge and parity write their reports, job summary and plot,
print the verdict line and choose the exit code the same way (rmsnorm_eps/cli/_gate.py)."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.cli._gate import TailOptions, tail_options
from rmsnorm_eps.cli._options import Format
from rmsnorm_eps.dumps import npy_bytes

ROOT = Path(__file__).resolve().parents[1]
Cli = Callable[..., object]

# Each command on a failing input copied into tmp_path: (files to copy, argv using them).
FAILING: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ratio": (("examples/ci/q_dump.npz",), ("ratio", "q_dump.npz", "--eps", "1e-5")),
    "compare": (
        ("examples/ci/q_dump.npz",),
        ("compare", "q_dump.npz", "--from", "eps=1e-5", "--to", "eps=1e-4"),
    ),
    "merge": (
        ("tests/data/merge/shard0.summary.json", "tests/data/merge/shard1.summary.json"),
        ("merge", "shard0.summary.json", "shard1.summary.json"),
    ),
    "parity": (
        ("examples/parity/probes.npz", "examples/parity/torch_eps_none.npy"),
        ("parity", "--probes", "probes.npz", "--actual", "torch_eps_none.npy"),
    ),
}
COMMANDS = sorted(FAILING)
BUDGETED = ["compare", "merge", "ratio"]  # parity has no budget: every element must pass
SKIPPING = ["compare", "ratio"]  # the commands that read dump layers


@pytest.fixture
def run(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, list[str]]]:
    """Run a command's failing case in tmp_path: (exit code, stdout, stderr lines)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def go(
        command: str, *extra: str, env: dict[str, str] | None = None
    ) -> tuple[int, str, list[str]]:
        files, argv = FAILING[command]
        for name in files:
            target = tmp_path / Path(name).name
            if not target.exists():
                shutil.copy(ROOT / name, target)
        res = cli(*argv, *extra, env=env)
        return res.exit_code, res.stdout, res.stderr.splitlines()  # type: ignore[attr-defined]

    return go


@pytest.mark.parametrize("command", COMMANDS)
def test_verdict_line_and_exit_code(command: str, run: Callable[..., tuple[int, str, list[str]]]):
    code, out, err = run(command)
    assert code == 1 and out
    assert len(err) == 1 and err[0].startswith("rmsnorm-eps: FAIL: ")
    code0, out0, err0 = run(command, "--exit-zero")
    assert (code0, out0, err0) == (0, out, err)  # same reports and line, exit 0


@pytest.mark.parametrize("command", COMMANDS)
def test_extra_reports_match_their_format_and_leave_stdout_alone(
    command: str, run: Callable[..., tuple[int, str, list[str]]], tmp_path: Path
) -> None:
    _, text, _ = run(command)
    extras = {"json": "r.json", "junit": "r.xml", "sarif": "r.sarif", "markdown": "r.md"}
    args = [a for fmt, path in extras.items() for a in ("--report", f"{fmt}={path}")]
    code, out, err = run(command, *args)
    assert code == 1 and out == text and len(err) == 1
    for fmt, path in extras.items():
        alone = run(command, "--format", fmt)[1]
        assert (tmp_path / path).read_text("utf-8") == alone, fmt
    json.loads((tmp_path / "r.sarif").read_text("utf-8"))
    # -o and --report together: the --format report goes to -o, nothing to stdout
    code, out, _ = run(command, "-o", "main.json", "--format", "json", "--report", "text=t.txt")
    assert code == 1 and out == ""
    assert (tmp_path / "main.json").read_text("utf-8") == run(command, "--format", "json")[1]
    assert (tmp_path / "t.txt").read_text("utf-8").split() == text.split()


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_report_spec_is_a_usage_error_before_any_work(
    command: str, run: Callable[..., tuple[int, str, list[str]]], tmp_path: Path
) -> None:
    (tmp_path / "adir").mkdir()
    for spec in ("xml=r.xml", "json", "json=", "json=adir"):
        code, out, err = run(command, "-o", "o.txt", "--report", spec)
        assert code == 2 and out == "" and len(err) == 1 and "--report" in err[0], spec
        assert not (tmp_path / "o.txt").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_step_summary(
    command: str, run: Callable[..., tuple[int, str, list[str]]], tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    code, _, err = run(command, "--summary", env={"GITHUB_STEP_SUMMARY": str(summary)})
    markdown = run(command, "--format", "markdown")[1]
    assert code == 1 and len(err) == 1
    assert summary.read_text("utf-8") == "earlier step\n" + markdown  # appended, not replaced
    code, _, err = run(command, "--summary")  # unset: a note, the same verdict
    assert code == 1 and "GITHUB_STEP_SUMMARY is not set" in err[0] and "FAIL" in err[1]


@pytest.mark.parametrize("command", COMMANDS)
def test_plot(command: str, run: Callable[..., tuple[int, str, list[str]]], tmp_path: Path):
    code, _, err = run(command, "--plot", "fig.txt", "-o", "o.txt")
    assert code == 2 and "fig.txt" in err[0] and not (tmp_path / "o.txt").exists()
    pytest.importorskip("matplotlib")
    code, _, err = run(command, "--plot", "fig.png")
    assert code == 1 and len(err) == 1
    assert (tmp_path / "fig.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("command", BUDGETED)
def test_budgets(command: str, run: Callable[..., tuple[int, str, list[str]]]) -> None:
    code, _, err = run(command, "--max-violations", "100000")
    assert code == 0 and err[0].startswith("rmsnorm-eps: PASS: ") and "within budget" in err[0]
    code, _, err = run(command, "--max-fraction", "1")
    assert code == 0 and err[0].startswith("rmsnorm-eps: PASS: ")
    code, _, err = run(command, "--max-violations", "1")
    assert code == 1 and err[0].startswith("rmsnorm-eps: FAIL: ") and "over budget" in err[0]


@pytest.mark.parametrize("command", SKIPPING)
def test_skip_unreadable_never_exits_zero(
    command: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    argv = list(FAILING[command][1])
    argv[1] = "tests/data/skip/mixed.npz"
    for extra in ((), ("--exit-zero",), ("--max-fraction", "1")):
        res = cli(*argv, "--skip-unreadable", *extra)
        err = res.stderr.splitlines()  # type: ignore[attr-defined]
        assert res.exit_code == 1, extra  # type: ignore[attr-defined]
        assert len(err) == 1 and err[0].startswith("rmsnorm-eps: INCOMPLETE: ")
        assert "unreadable layer(s)" in err[0]


def test_compare_from_config_skip_unreadable_lists_the_layer(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """compare --from config --skip-unreadable exits 1 listing the unreadable members, as
    ratio --config does (it used to exit 2 opening the dump strictly for the layer names)."""
    monkeypatch.chdir(ROOT)
    config = tmp_path / "abc.yaml"
    config.write_text(
        "schema_version: 1\nmodel: abc\ndefaults:\n  eps: 1e-5\n  placement: inside\n"
        'layers:\n  "?": {}\n',
        encoding="utf-8",
    )
    dump = tmp_path / "broken.npz"
    with zipfile.ZipFile(dump, "w") as zf:  # b's header is broken: found when opening the dump
        zf.writestr("a.npy", npy_bytes(np.array([1.0, 2.0, 1e-9])))
        zf.writestr("b.npy", b"not an array at all")
    common = (str(dump), "--config", str(config))
    res = cli("compare", *common, "--from", "config", "--to", "eps=1e-6", "--skip-unreadable")
    assert res.exit_code == 1, res  # type: ignore[attr-defined]
    assert "INCOMPLETE" in res.stderr and "layer(s): b" in res.stderr  # type: ignore[attr-defined]
    ratio = cli("ratio", *common, "--skip-unreadable")
    assert ratio.exit_code == 1 and "INCOMPLETE" in ratio.stderr  # type: ignore[attr-defined]


def test_tail_options_is_one_frozen_object(tmp_path: Path) -> None:
    options = tail_options(
        Format.GITHUB, None, reports=["json=a.json", "SARIF=b.sarif"], exit_zero=True
    )
    assert isinstance(options, TailOptions)
    assert options.reports == ((Format.JSON, Path("a.json")), (Format.SARIF, Path("b.sarif")))
    with pytest.raises(AttributeError):
        options.exit_zero = False  # type: ignore[misc]


def test_finish_without_verdict_for_recording_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """capture (which records rather than judges) prints its own line; skipped layers still
    make the run INCOMPLETE with exit 1."""
    import typer

    from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
    from rmsnorm_eps.cli._gate import finish
    from rmsnorm_eps.sources.interface import Unreadable

    path = tmp_path / "q.npy"
    np.save(path, np.array([1.0, 2.0]))
    report = analyze_dump(path, 1e-5)
    options = tail_options(Format.JSON, tmp_path / "r.json")
    with pytest.raises(typer.Exit) as exit_info:
        finish(
            report, evaluate_gate(report), options, passed=True, message="captured", verdict=False
        )
    assert exit_info.value.exit_code == 0
    assert capsys.readouterr().err == "rmsnorm-eps: captured\n"
    assert json.loads((tmp_path / "r.json").read_text("utf-8"))["command"] == "ratio"
    skipped = (Unreadable("layer.b", "cannot read data"),)
    with pytest.raises(typer.Exit) as exit_info:
        finish(report, None, options, passed=True, message="x", skipped=skipped, verdict=False)
    assert exit_info.value.exit_code == 1
    assert capsys.readouterr().err.startswith("rmsnorm-eps: INCOMPLETE: x; skipped 1")


def test_a_skipped_member_still_matches_its_pattern(cli: Cli, tmp_path: Path) -> None:
    """A YAML pattern naming only the unreadable member b used to be 'match no layer of the
    dump: b' (exit 2) with --skip-unreadable, in ratio --config and compare --from config."""
    config = tmp_path / "ab.yaml"
    config.write_text(
        "schema_version: 1\nmodel: ab\ndefaults:\n  eps: 1e-5\n  placement: inside\n"
        'layers:\n  "a": {}\n  "b": {eps: 1e-6}\n',
        encoding="utf-8",
    )
    dump = tmp_path / "broken.npz"
    with zipfile.ZipFile(dump, "w") as zf:
        zf.writestr("a.npy", npy_bytes(np.array([1.0, 2.0])))
        zf.writestr("b.npy", b"not an array at all")
    common = (str(dump), "--config", str(config), "--skip-unreadable")
    for args in (("ratio", *common), ("compare", *common, "--from", "config", "--to", "eps=1e-5")):
        res = cli(*args)
        assert res.exit_code == 1, res  # type: ignore[attr-defined]
        err = res.stderr  # type: ignore[attr-defined]
        assert "match no layer" not in err and "INCOMPLETE" in err and "layer(s): b" in err
    # without b in the dump at all, the pattern is still a typo
    with zipfile.ZipFile(dump, "w") as zf:
        zf.writestr("a.npy", npy_bytes(np.array([1.0, 2.0])))
    res = cli("ratio", *common)
    assert res.exit_code == 2 and "1 layer pattern(s) match no layer of the dump: b" in res.stderr  # type: ignore[attr-defined]
