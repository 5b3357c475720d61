"""_version.py: the version the package reports is the one pyproject.toml declares (and the
installed distribution's, when the installed metadata comes from this tree)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import rmsnorm_eps
from rmsnorm_eps._version import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_matches_pyproject() -> None:
    if sys.version_info >= (3, 11):
        import tomllib

        with open(ROOT / "pyproject.toml", "rb") as fh:
            declared = tomllib.load(fh)["project"]["version"]
    else:  # pragma: no cover - python 3.10
        match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
        assert match is not None
        declared = match.group(1)
    assert __version__ == declared
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+|\.dev\d+)?", __version__)


def test_package_reexports_it() -> None:
    assert rmsnorm_eps.__version__ == __version__


def test_installed_metadata_agrees() -> None:
    from importlib import metadata

    try:
        installed = metadata.version("rmsnorm-eps")
    except metadata.PackageNotFoundError:
        pytest.skip("rmsnorm-eps is not installed (running from a plain checkout)")
    assert installed == __version__
