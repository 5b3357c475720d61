"""Reports of 100,000 layers in bounded memory (issue 12: "peak RSS <= 256 MiB on every input").

A hostile or merely huge ``.npz`` of 100,000 tiny members (three float32 q each, one of them
violating) goes through the real command line in a fresh process per run, in every output
format, to stdout and to ``-o FILE``, for ``ratio`` and ``compare``; and a YAML config of about
as many patterns as the YAML caps let in goes through ``config show`` and ``config diff``.
Each run must stay within 256 MiB of peak resident memory (VmHWM of the child itself) and
write a complete, parseable report that accounts for every layer. Reports are made and
written layer by layer (``reports.render_chunks``); the result holds its layers compactly
(``layer_store.LayerStore``). Before that, the same runs peaked at 0.7 to 2.3 GB.

Times are printed by ``benchmarks/bench_hostile.py``, not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests.runner_lines import assert_inert

ROOT = Path(__file__).resolve().parents[1]
PEAK_LIMIT_MIB = 256.0
LAYERS = 100_000
PATTERNS = 29_900  # the YAML caps (120,000 values) let in about 30,000 one-key patterns

_LAUNCHER = r"""
import atexit, os, runpy, sys
def _record():
    with open("/proc/self/status") as fh:
        hwm = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
    with open(os.environ["SCALE_HWM"], "w") as fh:
        fh.write(str(hwm))
atexit.register(_record)
sys.argv[0] = "rmsnorm-eps"
runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scale")


@pytest.fixture(scope="module")
def many_layers(workdir: Path) -> Path:
    path = workdir / "members.npz"
    q = np.array([1.0, 2.0, 1e-9], np.float32)
    np.savez(path, **{f"model.layers.{i}.input_layernorm": q for i in range(LAYERS)})
    return path


def _patterns(path: Path, eps: str) -> Path:
    lines = [
        "schema_version: 1",
        "model: scale",
        "defaults:\n  eps: 1e-5\n  placement: inside\n  gain: w\n  norm: rms",
        "layers:",
        *(f'  "model.layers.{i}.*norm": {{eps: {eps}}}' for i in range(PATTERNS)),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(args: list[str], workdir: Path) -> tuple[int, float, str, str]:
    """Exit code, peak RSS (MiB), stdout and stderr of ``rmsnorm-eps ARGS`` in a fresh process."""
    hwm = workdir / "hwm"
    hwm.unlink(missing_ok=True)
    env = {**os.environ, "SCALE_HWM": str(hwm), "PYTHONPATH": str(ROOT)}
    env.pop("RMSNORM_EPS_FORMAT", None)
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *args],
        capture_output=True,
        env=env,
        timeout=600,
        check=False,
    )
    peak = int(hwm.read_text()) / 1024
    return proc.returncode, peak, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")


def _check_report(fmt: str, out: str, layers: int) -> None:
    """The report is complete: it parses and names every layer (or every check)."""
    if fmt == "json":
        doc = json.loads(out)
        assert doc["summary"]["layers"] == layers
        assert len(doc["layers"]) == layers
    elif fmt == "sarif":
        doc = json.loads(out)
        results = doc["runs"][0]["results"]  # the failed checks: one below-bound per layer
        assert len(results) == layers
        assert {r["ruleId"] for r in results} == {"ratio/below-bound"}
    elif fmt == "junit":
        root = ET.fromstring(out.encode("utf-8"))
        assert int(root.get("tests", "0")) == 2 * layers
    elif fmt == "text":
        assert f"Members: {layers} in the file, {layers} analysed" in out
        assert out.count("input_layernorm: inputs per decade") == layers  # one histogram each
    else:
        assert "model.layers.99999.input_layernorm" in out


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "github", "junit", "sarif"])
def test_ratio_of_100000_layers_in_bounded_memory(
    fmt: str, many_layers: Path, workdir: Path
) -> None:
    code, peak, out, err = _run(["ratio", "--eps", "1e-5", str(many_layers), "-f", fmt], workdir)
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith("rmsnorm-eps: FAIL: 100000 violation(s)")
    assert peak <= PEAK_LIMIT_MIB, f"{fmt}: peak RSS {peak:.1f} MiB"
    assert_inert(out, err, fmt)
    _check_report(fmt, out, LAYERS)


def test_ratio_reports_to_files_in_bounded_memory(many_layers: Path, workdir: Path) -> None:
    """``-o``, ``--report`` and ``--save-summary`` in one run: every file written whole."""
    text, sarif, summary = workdir / "r.txt", workdir / "r.sarif", workdir / "s.json"
    args = ["ratio", "--eps", "1e-5", str(many_layers), "-o", str(text)]
    args += ["--report", f"sarif={sarif}", "--save-summary", str(summary)]
    code, peak, out, err = _run(args, workdir)
    assert code == 1, err
    assert out == ""
    assert peak <= PEAK_LIMIT_MIB, f"peak RSS {peak:.1f} MiB"
    _check_report("text", text.read_text(encoding="utf-8"), LAYERS)
    _check_report("sarif", sarif.read_text(encoding="utf-8"), LAYERS)
    assert len(json.loads(summary.read_text(encoding="utf-8"))["layers"]) == LAYERS


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_compare_of_100000_layers_in_bounded_memory(
    fmt: str, many_layers: Path, workdir: Path
) -> None:
    args = ["compare", str(many_layers), "--from", "eps=1e-6", "--to", "eps=1e-5", "-f", fmt]
    code, peak, out, err = _run(args, workdir)
    assert code == 1, err
    assert peak <= PEAK_LIMIT_MIB, f"compare {fmt}: peak RSS {peak:.1f} MiB"
    if fmt == "json":
        assert len(json.loads(out)["layers"]) == LAYERS
    elif fmt == "sarif":
        assert json.loads(out)["runs"][0]["results"]
    else:
        assert "model.layers.99999.input_layernorm" in out


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit", "sarif"])
def test_config_at_the_yaml_caps_in_bounded_memory(fmt: str, workdir: Path) -> None:
    a = _patterns(workdir / "a.yaml", "1e-6")
    b = _patterns(workdir / "b.yaml", "1e-2")
    code, peak, out, err = _run(["config", "diff", str(a), str(b), "-f", fmt], workdir)
    assert code == 1, err
    assert peak <= PEAK_LIMIT_MIB, f"config diff {fmt}: peak RSS {peak:.1f} MiB"
    assert "model.layers.29899.*norm" in out or "model.layers.29899.\\u002anorm" in out
    if fmt in ("text", "json"):
        code, peak, out, err = _run(["config", "show", str(a), "-f", fmt], workdir)
        assert code == 0, err
        assert peak <= PEAK_LIMIT_MIB, f"config show {fmt}: peak RSS {peak:.1f} MiB"
        if fmt == "json":
            assert len(json.loads(out)["layers"]) == PATTERNS
