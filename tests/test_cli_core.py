"""CLI contract of `bound` and `ratio`: output, exit codes, budgets, errors (in-process)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Result, run_module

Cli = Callable[..., Result]
EXAMPLE = str(ROOT / "examples" / "q_dump.npz")


def _one_line_error(res: Result, *needles: str) -> None:
    assert res.exit_code == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("rmsnorm-eps: error: ")
    assert "Traceback" not in res.stderr + res.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# ------------------------------------------------------------------------------------ bound


def test_bound_default_and_json(cli: Cli) -> None:
    res = cli("bound", "--delta", "0.01")
    assert res.exit_code == 0
    assert "49.2512562814" in res.stdout
    doc = json.loads(cli("bound", "--delta", "0.01", "--format", "json").stdout)
    assert doc["min_ratio"] == 49.25125628140703
    assert f"{doc['min_ratio']:.12g}" == "49.2512562814"
    assert doc["schema_version"] == 1 and doc["command"] == "bound"


def test_bound_with_eps(cli: Cli) -> None:
    doc = json.loads(cli("bound", "--delta", "0.01", "--eps", "1e-6", "-f", "json").stdout)
    assert doc["min_q"] == pytest.approx(4.92512562814e-05, rel=1e-12)
    assert doc["min_rms"] == pytest.approx(0.00701792392958, rel=1e-11)
    text = cli("bound", "--delta", "0.01", "--eps", "1e-6").stdout
    assert "4.92512562814e-05" in text and "0.00701792392958" in text


def test_bound_table_seed_figures(cli: Cli) -> None:
    text = cli("bound", "--table").stdout
    for figure in ("0.099504", "0.301511", "0.707107", "0.953463", "0.995037"):
        assert figure in text
    doc = json.loads(cli("bound", "--ratios", "0.5, 2,1000", "-f", "json").stdout)
    assert [r["ratio"] for r in doc["ratios"]] == [0.5, 2.0, 1000.0]
    assert doc["ratios"][1]["attenuation"] == pytest.approx((2 / 3) ** 0.5, rel=1e-15)
    one = json.loads(cli("bound", "--ratio", "1", "--eps", "1e-5", "-f", "json").stdout)
    assert one["ratios"][0]["attenuation"] == pytest.approx(2**-0.5, rel=1e-15)
    assert one["ratios"][0]["q"] == 1e-5


@pytest.mark.parametrize("delta", ["0", "1", "2", "-0.5", "nan"])
def test_bound_bad_delta(cli: Cli, delta: str) -> None:
    _one_line_error(cli("bound", "--delta", delta), "delta")


def test_bound_bad_combinations(cli: Cli) -> None:
    _one_line_error(cli("bound", "--delta", "0.01", "--ratio", "3"), "--delta")
    _one_line_error(cli("bound", "--ratios", "1,x"), "'x'")
    _one_line_error(cli("bound", "--ratio", "-1"), "ratio")
    _one_line_error(cli("bound", "--eps", "0"), "eps")


# ------------------------------------------------------------------------------------ ratio


def test_ratio_on_shipped_example_fails_and_lists_violations(cli: Cli) -> None:
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE)
    assert res.exit_code == 1
    assert "model.layers.0.input_layernorm" in res.stdout
    assert "[0, 3]" in res.stdout and "[1, 7]" in res.stdout and "[1, 12]" in res.stdout
    assert "Total: 3 violation(s) in 2 of 4 layer(s)" in res.stdout
    assert res.stderr.startswith("rmsnorm-eps: FAIL: 3 violation(s)")
    assert cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "--exit-zero").exit_code == 0


def test_ratio_clean_exit_zero(cli: Cli, write_npy: Callable[..., Path]) -> None:
    path = write_npy(np.full(10, 1.0, np.float32))
    res = cli("ratio", "--eps", "1e-6", "-q", str(path))
    assert res.exit_code == 0, res
    assert res.stderr.startswith("rmsnorm-eps: PASS: 0 violation(s)")


def test_ratio_budgets(cli: Cli) -> None:
    base = ["ratio", "--eps", "1e-5", "--q-file", EXAMPLE]
    assert cli(*base, "--max-violations", "3").exit_code == 0
    assert cli(*base, "--max-violations", "2").exit_code == 1
    assert cli(*base, "--max-fraction", str(3 / 128)).exit_code == 0
    assert cli(*base, "--max-fraction", "0.0234").exit_code == 1  # 3/128 = 0.0234375
    assert cli(*base, "--max-violations", "2", "--exit-zero").exit_code == 0
    _one_line_error(cli(*base, "--max-fraction", "1.5"), "--max-fraction")
    _one_line_error(cli(*base, "--max-violations", "-1"), "--max-violations")


def test_ratio_delta_and_min_ratio(cli: Cli) -> None:
    base = ["ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "-f", "json"]
    loose = json.loads(cli(*base, "--delta", "0.1").stdout)
    assert loose["summary"]["below_bound"] == 1  # q/eps = 2 (A = 0.816 < 0.9); 31 passes
    assert loose["min_ratio"] == pytest.approx(0.81 / (0.1 * 1.9), rel=1e-15)
    by_ratio = json.loads(cli(*base, "--min-ratio", "40").stdout)
    assert by_ratio["summary"]["below_bound"] == 2  # q/eps = 2 and 31
    _one_line_error(cli(*base, "--min-ratio", "40", "--delta", "0.1"), "--delta")


def test_ratio_json_equals_library(cli: Cli) -> None:
    from rmsnorm_eps.analysis import analyze_dump

    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "--format", "json", "--top", "2")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    rep = analyze_dump(EXAMPLE, 1e-5, top_k=2)
    assert doc["summary"]["violations"] == rep.violations == 3
    for d_layer, layer in zip(doc["layers"], rep.layers):
        assert d_layer["name"] == layer.name
        assert d_layer["min_q"] == layer.min_q
        assert d_layer["min_ratio"] == layer.min_ratio
        assert len(d_layer["worst"]) == 2
    assert doc["gate"] == {
        "passed": False,
        "violations": 3,
        "fraction": 3 / 128,
        "max_violations": None,
        "max_fraction": None,
        "reason": "3 violation(s), none allowed",
    }


def test_ratio_json_is_deterministic(cli: Cli) -> None:
    a = cli("ratio", "--eps", "1e-5", "-q", EXAMPLE, "-f", "json").stdout
    b = cli("ratio", "--eps", "1e-5", "-q", EXAMPLE, "-f", "json").stdout
    assert a == b


def test_ratio_output_file_is_written_atomically(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    out.write_text("previous")
    res = cli("ratio", "--eps", "1e-5", "-q", EXAMPLE, "-f", "json", "-o", str(out))
    assert res.exit_code == 1 and res.stdout == ""
    assert json.loads(out.read_text())["summary"]["violations"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


def test_ratio_env_format_default(cli: Cli) -> None:
    res = cli("ratio", "--eps", "1e-5", "-q", EXAMPLE, env={"RMSNORM_EPS_FORMAT": "json"})
    assert json.loads(res.stdout)["command"] == "ratio"


def test_ratio_nonfinite_counted_exit_1(cli: Cli, write_npy: Callable[..., Path]) -> None:
    path = write_npy(np.array([1.0, np.nan, np.inf, 1.0]))
    res = cli("ratio", "--eps", "1e-6", "-q", str(path), "-f", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["summary"]["nonfinite"] == 2 and doc["summary"]["below_bound"] == 0
    text = cli("ratio", "--eps", "1e-6", "-q", str(path)).stdout
    assert "2 nonfinite q (1 NaN, 1 inf)" in text


def test_ratio_raw(cli: Cli) -> None:
    res = cli(
        "ratio", "--eps", "1e-5", "-q", str(ROOT / "examples" / "acts.npz"), "--raw", "-f", "json"
    )
    doc = json.loads(res.stdout)
    assert res.exit_code == 1
    embed = doc["layers"][0]
    assert embed["raw_dim"] == 64 and embed["worst"][0]["index"] == [3]
    assert embed["worst"][0]["ratio"] == pytest.approx(0.9, rel=1e-6)


@pytest.mark.parametrize(
    ("eps", "needle"),
    [
        ("0", "eps must be finite and > 0"),
        ("-1", "eps must be finite and > 0"),
        ("nan", "eps must be finite and > 0"),
        ("abc", "--eps"),
        ("inf", "eps"),
    ],
)
def test_ratio_bad_eps(cli: Cli, eps: str, needle: str) -> None:
    _one_line_error(cli("ratio", "--eps", eps, "-q", EXAMPLE), needle)


@pytest.mark.parametrize("delta", ["0", "1", "2"])
def test_ratio_bad_delta(cli: Cli, delta: str) -> None:
    _one_line_error(cli("ratio", "--eps", "1e-5", "-q", EXAMPLE, "--delta", delta), "delta")


def test_ratio_bad_files(cli: Cli, tmp_path: Path, write_npy: Callable[..., Path]) -> None:
    _one_line_error(
        cli("ratio", "--eps", "1e-6", "-q", str(tmp_path / "nope.npy")), "nope.npy", "no such file"
    )
    _one_line_error(
        cli("ratio", "--eps", "1e-6", "-q", str(write_npy(np.zeros(0)))), "q.npy", "empty array"
    )
    _one_line_error(
        cli("ratio", "--eps", "1e-6", "-q", str(write_npy(np.arange(3), "i.npy"))), "i.npy", "int64"
    )
    _one_line_error(
        cli("ratio", "--eps", "1e-6", "-q", str(write_npy(np.array([-1.0]), "n.npy"))),
        "n.npy",
        "negative q",
    )
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _one_line_error(
        cli("ratio", "--eps", "1e-6", "-q", str(tmp_path / "obj.npy")), "obj.npy", "Python objects"
    )
    good = write_npy(np.ones(100), "t.npy")
    good.write_bytes(good.read_bytes()[:-8])
    _one_line_error(cli("ratio", "--eps", "1e-6", "-q", str(good)), "t.npy", "truncated")
    _one_line_error(cli("ratio", "-q", EXAMPLE), "--eps")


def test_ratio_no_color_plain_text(cli: Cli) -> None:
    res = cli("ratio", "--eps", "1e-5", "-q", EXAMPLE, env={"NO_COLOR": "1"})
    assert "\x1b[" not in res.stdout


def test_real_process_exit_codes_and_debug(tmp_path: Path) -> None:
    assert run_module("ratio", "--eps", "1e-5", "-q", EXAMPLE).returncode == 1
    bad = run_module("ratio", "--eps", "1e-5", "-q", str(tmp_path / "x.npy"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == f"rmsnorm-eps: error: {tmp_path / 'x.npy'}: no such file"
    dbg = run_module("--debug", "ratio", "--eps", "1e-5", "-q", str(tmp_path / "x.npy"))
    assert dbg.returncode != 0 and "Traceback" in dbg.stderr
    assert run_module("--version").stdout.startswith("rmsnorm-eps ")
    usage = run_module("ratio", "--eps", "1e-5")
    assert usage.returncode == 2 and "--q-file" in usage.stderr


def test_internal_error_is_exit_2_one_line(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmsnorm_eps.analysis as analysis

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("synthetic failure")

    monkeypatch.setattr(analysis, "analyze_dump", boom)
    _one_line_error(
        cli("ratio", "--eps", "1e-5", "-q", EXAMPLE),
        "internal error",
        "synthetic failure",
        "--debug",
    )


def test_atomic_output_keeps_devices_and_permissions(tmp_path: Path) -> None:
    import os
    import stat

    from rmsnorm_eps.atomic import atomic_write_text
    from rmsnorm_eps.errors import InputFileError

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading

    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomic_write_text(fifo, "through the pipe")
    reader.join(5)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # not replaced by a regular file

    old = os.umask(0o022)
    try:
        new = tmp_path / "new.txt"
        atomic_write_text(new, "x")
        assert stat.S_IMODE(os.stat(new).st_mode) == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        os.chmod(kept, 0o640)
        atomic_write_text(kept, "new")
        assert stat.S_IMODE(os.stat(kept).st_mode) == 0o640 and kept.read_text() == "new"
    finally:
        os.umask(old)
    with pytest.raises(InputFileError, match="is a directory"):
        atomic_write_text(tmp_path, "x")


def test_atomic_output_failure_keeps_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from rmsnorm_eps.atomic import atomic_write_text

    target = tmp_path / "report.json"
    target.write_text("previous report")

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    from rmsnorm_eps.errors import InputFileError

    with pytest.raises(InputFileError, match="cannot write"):
        atomic_write_text(target, "half a new report")
    assert target.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
