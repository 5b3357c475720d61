"""Shared fixtures: a CliRunner wrapper and small dump writers."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rmsnorm_eps.cli import app

ROOT = Path(__file__).resolve().parents[1]


class Result:
    """Outcome of one CLI run: exit code, stdout, stderr."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self) -> str:
        return f"Result(exit={self.exit_code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Run the CLI in-process: ``cli("ratio", "--eps", "1e-6", ...)``."""

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        runner = CliRunner()
        res = runner.invoke(app, list(args), env=env, catch_exceptions=False)
        return Result(res.exit_code, res.stdout, res.stderr)

    return run


def run_module(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rmsnorm_eps ARGS`` in a subprocess (for exit paths of the real process)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "rmsnorm_eps", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture
def write_npz(tmp_path: Path) -> Callable[..., Path]:
    def write(name: str = "dump.npz", **arrays: np.ndarray) -> Path:
        path = tmp_path / name
        np.savez(path, **arrays)
        return path

    return write


@pytest.fixture
def write_npy(tmp_path: Path) -> Callable[..., Path]:
    def write(array: np.ndarray, name: str = "q.npy") -> Path:
        path = tmp_path / name
        np.save(path, array, allow_pickle=False)
        return path

    return write


def write_many_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """An .npz of ``arrays`` (stored, not compressed), as ``np.savez`` writes it but with each
    distinct array serialised once: thousands of tiny members in a fraction of the time."""
    cache: dict[tuple[str, tuple[int, ...], bytes], bytes] = {}
    with zipfile.ZipFile(path, "w") as zf:
        for name, array in arrays.items():
            key = (array.dtype.str, array.shape, array.tobytes())
            if key not in cache:
                buf = io.BytesIO()
                np.save(buf, array, allow_pickle=False)
                cache[key] = buf.getvalue()
            zf.writestr(f"{name}.npy", cache[key])
    return path
