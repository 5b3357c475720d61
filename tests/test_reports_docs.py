"""Output shown in the docs is real: each marked block is an excerpt of a golden file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "reports.md", ROOT / "docs" / "json-schema.md"]
MARK = re.compile(r"<!-- output of: (?P<file>\S+) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.S)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_marked_blocks_are_golden_excerpts(doc: Path) -> None:
    blocks = list(MARK.finditer(doc.read_text("utf-8")))
    assert blocks, f"{doc} has no marked output block"
    for m in blocks:
        golden = _lines((ROOT / m["file"]).read_text("utf-8"))
        shown = _lines(m["body"])
        starts = [i for i, line in enumerate(golden) if line == shown[0]]
        assert any(golden[i : i + len(shown)] == shown for i in starts), (doc, m["file"])


def test_plot_in_the_readme_exists_and_is_a_png() -> None:
    data = (ROOT / "docs" / "ratio-plot.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") == 800
    assert int.from_bytes(data[20:24], "big") == 780  # 3 layers x 260 px
