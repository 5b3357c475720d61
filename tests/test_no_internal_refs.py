"""What users read cites public sources and installs from where the tool lives.

The project's internal notes (FACTS.md) are not public: the package, its output, the docs, the
configs and the examples cite the framework's documentation or source file instead. No package
index carries rmsnorm-eps, so no install line names a bare registry requirement, and the
pre-commit examples pin a commit, not a release tag that does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT

from rmsnorm_eps.config.defaults_table import FRAMEWORK_DEFAULTS, FrameworkDefault

#: Text files users read or run: the package (code and data), docs, configs, examples.
SCANNED = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / ".pre-commit-hooks.yaml",
    ROOT / "pyproject.toml",
    *(ROOT / "rmsnorm_eps").rglob("*"),
    *(ROOT / "docs").rglob("*"),
    *(ROOT / "configs").rglob("*"),
    *(ROOT / "examples").rglob("*"),
    *(ROOT / "benchmarks").rglob("*"),
]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt", ".cfg"}

INTERNAL = re.compile(r"FACTS|\bsection \d+\b|§\s*\d")
# `pip install 'rmsnorm-eps[x]'` / `pip install rmsnorm-eps` would go to a package index.
BARE_INSTALL = re.compile(
    r"pip install (-U |--upgrade )?['\"]?rmsnorm-eps(\[[^\]]*\])?(?!\s*@)['\"]?(\s|$|`)"
)
TAG_REV = re.compile(r"rev:\s*['\"<]?[^\n]*v\d+\.\d+")


def _texts() -> list[Path]:
    files = [p for p in SCANNED if p.is_file() and p.suffix in TEXT_SUFFIXES]
    files += [p for p in SCANNED if p.name == ".pre-commit-hooks.yaml"]
    return sorted(set(files))


def _hits(pattern: re.Pattern[str]) -> list[str]:
    out = []
    for path in _texts():
        for n, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


def test_scan_covers_the_product() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _texts()}
    for expected in (
        "README.md",
        ".pre-commit-hooks.yaml",
        "rmsnorm_eps/config/defaults_table.py",
        "configs/llama-3-8b.yaml",
        "examples/ci/github-actions.yml",
        "docs/DEVELOPING.md",
    ):
        assert expected in names


def test_no_reference_to_internal_notes() -> None:
    assert _hits(INTERNAL) == []


def test_patterns_catch_what_they_are_for() -> None:
    assert INTERNAL.search("eps 1e-6 (FACTS.md section 3)")
    assert INTERNAL.search("per-dtype defaults (notes §5)")
    assert BARE_INSTALL.search("pip install 'rmsnorm-eps[torch]'")
    assert BARE_INSTALL.search("run: pip install rmsnorm-eps")
    assert not BARE_INSTALL.search('pip install "rmsnorm-eps[torch] @ git+https://x.invalid/r.git"')
    assert TAG_REV.search("    rev: <a tag, e.g. v0.1.0>")
    assert not TAG_REV.search("    rev: <commit sha>")


def test_no_install_from_a_package_index() -> None:
    assert _hits(BARE_INSTALL) == []


def test_pre_commit_examples_pin_a_commit() -> None:
    assert _hits(TAG_REV) == []


@pytest.mark.parametrize("row", FRAMEWORK_DEFAULTS, ids=lambda r: r.name)
def test_defaults_rows_name_a_public_source(row: FrameworkDefault) -> None:
    source = row.source
    assert not INTERNAL.search(source), source
    # a file path, a PR/issue, or a named spec: something a reader can open
    assert re.search(r"\.(py|cpp|md)\b|PR \d+|spec", source), source
