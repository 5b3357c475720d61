"""Report output is atomic: a writer killed mid-way (SIGKILL) or failing leaves the previous
report intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps import atomic
from rmsnorm_eps.errors import InputFileError

ROOT = Path(__file__).resolve().parents[1]

#: Runs the real CLI, but os.fsync (called by atomic_write_bytes after writing all data to the
#: temporary file, before renaming it over the target) announces itself and blocks: the parent
#: kills the process there, mid-way through writing the report.
_BLOCK_IN_FSYNC = r"""
import os, runpy, sys, time
def blocked(fd):
    print("WRITING", flush=True)
    time.sleep(120)
os.fsync = blocked
sys.argv[0] = "rmsnorm-eps"
runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)
"""


def test_sigkill_during_report_write_keeps_previous_report(tmp_path: Path) -> None:
    dump = tmp_path / "q.npz"
    layers = {f"layer{i}": np.full(100, 1e-3 + i, np.float32) for i in range(300)}
    np.savez(dump, **layers)  # many layers: a large JSON report
    report = tmp_path / "report.json"
    previous = '{"previous": "report"}\n'
    report.write_text(previous, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _BLOCK_IN_FSYNC,
            "ratio",
            "--eps",
            "1e-5",
            "-q",
            str(dump),
            "--format",
            "json",
            "--output",
            str(report),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "WRITING", proc.stderr.read() if proc.stderr else ""
        temps = list(tmp_path.glob(".report.json.*.tmp"))
        assert len(temps) == 1 and temps[0].stat().st_size > 100_000  # the new report, written
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert report.read_text(encoding="utf-8") == previous  # untouched by the killed writer


def test_failure_before_rename_keeps_previous_report_and_removes_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.txt"
    target.write_text("old\n", encoding="utf-8")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(InputFileError, match="cannot write: No space left on device"):
        atomic.atomic_write_text(target, "new\n" * 100_000)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


def test_complete_write_replaces_report(tmp_path: Path) -> None:
    """Control: without the kill, the same writer does replace the report."""
    target = tmp_path / "report.txt"
    target.write_text("old\n", encoding="utf-8")
    atomic.atomic_write_text(target, "new\n")
    assert target.read_text(encoding="utf-8") == "new\n"
