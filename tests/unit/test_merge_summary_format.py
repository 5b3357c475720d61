"""Unit tests of rmsnorm_eps.merge.summary_format: round trip, the table-driven validator's
key paths and messages, and the size cap that bounds peak memory."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.layer_record import ratio_layer
from rmsnorm_eps.merge.summary_format import (
    MAX_SUMMARY_BYTES,
    load_summary,
    summary_document,
    summary_from_document,
    write_summary,
)

ROOT = Path(__file__).resolve().parents[2]


def _doc(tmp_path: Path) -> dict[str, Any]:
    q = np.array([[1e-9, 2.0, np.nan], [0.0, 3e-7, 5.0]], np.float64)
    path = tmp_path / "q.npy"
    path.write_bytes(npy_bytes(q))
    return summary_document(analyze_dump(path, 1e-6, top_k=2))


def test_round_trip(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    report = analyze_dump(tmp_path / "q.npy", 1e-6, top_k=2)
    write_summary(report, tmp_path / "s.json")
    shard = load_summary(tmp_path / "s.json")
    (layer,) = shard.layers
    assert (layer.name, layer.shape, layer.count, layer.nan_count) == ("q", (2, 3), 6, 1)
    assert [(w.index, w.q) for w in layer.worst] == [((0, 0), 1e-9), ((1, 1), 3e-7)]  # q > 0
    assert (layer.zero_count, layer.min_q, layer.min_pos_q) == (1, 0.0, 1e-9)
    # read back into the LayerResult that was written (compared as JSON: NaN != NaN)
    assert ratio_layer(layer) == ratio_layer(report.layers[0])
    assert layer.below_bound == report.below_bound
    assert shard.top_k == 2 and shard.min_ratio == doc["min_ratio"]


def _broken(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    obj: Any = out
    for key in path[:-1]:
        obj = obj[key]
    if value is KeyError:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "key", "message"),
    [
        (["schema_version"], 4, "schema_version", "unsupported summary version 4"),
        (["schema_version"], 2, "schema_version", "summary version 2 does not say whether"),
        (["layers", 0, "quantity"], "x", "layers[0].quantity", 'expected "q" or "v", got'),
        (["layers", 0, "quantity"], KeyError, "layers[0].quantity", "missing"),
        (["schema_version"], 1, "schema_version", "summary version 1 counts q = 0 as below"),
        (["raw"], "yes", "raw", "expected true or false, got 'yes'"),
        (["source"], KeyError, "source", "missing"),
        (["layers"], [], "layers", "expected a non-empty list"),
        (["layers", 0, "shape"], [2, -3], "layers[0].shape", "expected a list of sizes"),
        (["layers", 0, "raw_dim"], 0, "layers[0].raw_dim", "expected an integer >= 1 or null"),
        (["layers", 0, "eps"], -1.0, "layers[0].eps", "eps must be a finite number > 0"),
        (["layers", 0, "worst"], {}, "layers[0].worst", "must be lists"),
        (
            ["layers", 0, "worst", 1, "index"],
            [0, 3],
            "layers[0].worst[1].index",
            "within shape [2, 3]",
        ),
        (["layers", 0, "worst", 0, "q"], "nan", "layers[0].worst[0].q", "a finite number"),
        (
            ["layers", 0, "decades", 0],
            {"decade": 10_000, "count": 1},
            "layers[0].decades[0].decade",
            "expected a decade -330..308, got 10000",
        ),
        (["layers", 0, "decades", 0], [3, 1], "layers[0].decades[0].decade", "missing"),
        (["layers", 0, "nan"], True, "layers[0].nan", "expected an integer >= 0"),
        (["layers", 0, "count"], 7, "layers[0].count", "does not match shape"),
        (["layers", 0, "zero"], 0, "layers[0].decades", "zero + decade counts"),
        (["delta"], 1.0, "delta", "expected a number in (0, 1), got 1.0"),
        (["min_ratio"], 0, "min_ratio", "expected a number > 0"),
        (["top_k"], -1, "top_k", "expected an integer >= 0"),
    ],
)
def test_validator_names_the_key_path(
    tmp_path: Path, path: list[Any], value: Any, key: str, message: str
) -> None:
    doc = _broken(_doc(tmp_path), path, value)
    with pytest.raises(InputFileError) as err:
        summary_from_document(doc, "shard0")
    assert err.value.key == key
    assert message in err.value.problem


def test_duplicate_layer_name(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc["layers"].append(copy.deepcopy(doc["layers"][0]))
    with pytest.raises(InputFileError, match="unique layer name"):
        summary_from_document(doc, "s")


def test_oversized_summary_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(MAX_SUMMARY_BYTES + 1)
    with pytest.raises(InputFileError, match=r"summary too large \(4194305 bytes; the limit"):
        load_summary(path)


# VmHWM is the peak of this process's own memory map (ru_maxrss would include the peak of the
# forked test process before exec).
_RSS_CHILD = """
import sys
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.layer_record import ratio_layer
from rmsnorm_eps.merge import load_summary
try:
    load_summary(sys.argv[1])
except InputFileError:
    pass
with open("/proc/self/status") as fh:
    print(next(line.split()[1] for line in fh if line.startswith("VmHWM:")))
"""


@pytest.mark.parametrize("unit", ['{"a":[]},', "[],", '"ab",'])
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_peak_rss_of_the_largest_hostile_summary(tmp_path: Path, unit: str) -> None:
    """The costliest JSON per byte (small containers, short strings) at just under the cap:
    the whole process stays far below 256 MiB (it was 348 MiB at the old 64 MiB cap)."""
    body = unit * ((MAX_SUMMARY_BYTES - 16) // len(unit))
    path = tmp_path / "hostile.json"
    path.write_text("[" + body + "0]", encoding="utf-8")
    assert path.stat().st_size <= MAX_SUMMARY_BYTES
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    peak_mib = int(out.stdout.strip()) / 1024
    assert peak_mib <= 256, f"peak RSS {peak_mib:.0f} MiB"


def test_nan_constants_are_refused(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    text = json.dumps(doc).replace('"min_ratio": ', '"min_ratio": NaN, "x": ', 1)
    path = tmp_path / "s.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError, match="NaN is not valid JSON"):
        load_summary(path)
