"""reports/commands/defaults.py: one resolved eps on its own first line (torch's rule gives
finfo of the compute type, as numpy states it), or one record per framework, wrapped at the
width (80 off a terminal) without splitting a word; the document holds every row."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.config.defaults import framework_defaults
from rmsnorm_eps.reports.commands.defaults import PIPE_WIDTH, DefaultsReporter
from rmsnorm_eps.reports.options import RenderOptions


@pytest.mark.parametrize(
    ("dtype", "compute"),
    [("bfloat16", np.float32), ("float16", np.float32), ("float64", np.float64)],
)
def test_one_torch_value_first_line_alone(dtype: str, compute: type[np.floating]) -> None:
    result = framework_defaults("torch", dtype)
    out = DefaultsReporter(RenderOptions()).text(result)
    first, *rest = out.splitlines()
    assert first == f"{float(np.finfo(compute).eps):.8g}"
    assert rest[0].startswith("torch.nn.RMSNorm / torch.nn.functional.rms_norm: ")
    assert all(line.startswith("  ") for line in rest[1:])  # the explanation, indented
    (row,) = DefaultsReporter().document(result)["rows"]
    assert row["eps"] == float(np.finfo(compute).eps)


def test_document_holds_every_row_in_order() -> None:
    result = framework_defaults(None, "float32")
    doc = DefaultsReporter().document(result)
    assert (doc["command"], doc["framework"], doc["dtype"]) == ("defaults", None, "float32")
    assert [r["name"] for r in doc["rows"]] == [x.row.name for x in result.rows]
    assert len(doc["rows"]) > 10
    llama = next(r for r in doc["rows"] if r["name"] == "hf-llama")
    assert llama["eps"] == 1e-6 and llama["table_eps"] == 1e-6
    cpp = next(r for r in doc["rows"] if r["name"] == "llama.cpp")
    assert cpp["eps"] is None  # read from the GGUF: no default


@pytest.mark.parametrize("width", [None, 120, 60, 40])
def test_records_wrap_at_the_width_without_splitting_words(width: int | None) -> None:
    result = framework_defaults(None, "float32")
    out = DefaultsReporter(RenderOptions(width=width)).text(result)
    limit = width or PIPE_WIDTH
    records = out.rstrip("\n").split("\n\n")
    assert len(records) == len(result.rows)
    for record, x in zip(records, result.rows, strict=True):
        lines = record.splitlines()
        assert lines[0].startswith(f"{x.row.name}: ")
        words = record.split()
        # every word of the source stays whole (textwrap breaks only between words)
        assert set(x.row.source.split()) <= set(words)
        for line in lines:
            assert len(line) <= limit or " " not in line.strip(), line
    cpp = records[[x.row.name for x in result.rows].index("llama.cpp")]
    assert "  eps      -" in cpp.splitlines()


def test_torch_without_a_dtype_has_no_number() -> None:
    out = DefaultsReporter(RenderOptions()).text(framework_defaults("torch"))
    assert out.splitlines()[1] == "  eps      -"
    assert "depends on the input dtype: give --dtype" in " ".join(out.split())
