"""Property-based fuzzing of parity's readers (probe files, implementation outputs in .npy,
.npz and .safetensors) and of merge's summary loader, like tests/test_fuzz_readers.py: valid
files with random edits, and nothing but :class:`rmsnorm_eps.errors.RmsnormEpsError` escapes.

2,000 examples per reader by default (RMSNORM_EPS_FUZZ_EXAMPLES to change it), derandomized
unless RMSNORM_EPS_FUZZ_RANDOM=1.
"""

from __future__ import annotations

import contextlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from corpus.parity_merge_cases import probe_members, probe_set, safetensors, summary_doc
from hypothesis import given
from hypothesis import strategies as st

from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import RmsnormEpsError
from rmsnorm_eps.merge import load_summary
from rmsnorm_eps.parity.actual import read_actual
from rmsnorm_eps.parity.probe_file import load_probes, probe_bytes
from tests.fuzz_helpers import FUZZ, FUZZ_WORK, fuzz_check, mutations

pytest.importorskip("safetensors")


def _outputs(dtype: str) -> np.ndarray:
    return np.asarray(probe_set().reference).astype(dtype)


def _zip(members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _st(arrays: dict[str, tuple[str, np.ndarray]]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "np"}}
    data = b""
    for name, (kind, arr) in arrays.items():
        raw = arr.tobytes()
        header[name] = {
            "dtype": kind,
            "shape": list(arr.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    return safetensors(header, data)


def _bf16() -> np.ndarray:
    import ml_dtypes

    return _outputs("float32").astype(ml_dtypes.bfloat16)


#: A RuntimeWarning from numpy would be a second stderr line on the command line: an error here.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::RuntimeWarning")]

PROBE_SEED = probe_bytes(probe_set())
ACTUAL_SEEDS = [
    npy_bytes(_outputs("float32")),
    _zip({"y.npy": npy_bytes(_outputs("float16"))}, zipfile.ZIP_DEFLATED),
    _st({"y": ("F32", _outputs("float32"))}),
    _st({"y": ("BF16", _bf16()), "z": ("F64", _outputs("float64")[:2])}),
]
SUMMARY_SEED = json.dumps(summary_doc(), indent=1).encode()
SHAPE = (probe_set().count, probe_set().dim)


def _read_actual(path: Path) -> None:
    for key in (None, "y"):
        with contextlib.suppress(RmsnormEpsError):
            read_actual(path, key, expect_shape=SHAPE)


def test_seeds_are_valid() -> None:
    (FUZZ_WORK / "p.npz").write_bytes(PROBE_SEED)
    assert load_probes(FUZZ_WORK / "p.npz").count == SHAPE[0]
    for i, seed in enumerate(ACTUAL_SEEDS):
        (FUZZ_WORK / f"a{i}").write_bytes(seed)
        got = read_actual(FUZZ_WORK / f"a{i}", None if i == 0 else "y", expect_shape=SHAPE)
        assert got.values.shape == SHAPE
    (FUZZ_WORK / "s.json").write_bytes(SUMMARY_SEED)
    assert load_summary(FUZZ_WORK / "s.json").layers[0].count == 3


@FUZZ
@given(data=mutations(PROBE_SEED))
def test_fuzz_probe_archive(data: bytes) -> None:
    """Edits of the zip bytes (members are deflated: most edits break the CRC or the stream)."""
    fuzz_check(load_probes, data, "fp.npz")


@FUZZ
@given(member=st.sampled_from(sorted(probe_members())), data=st.data())
def test_fuzz_probe_member(member: str, data: st.DataObject) -> None:
    """Edits of one member's .npy bytes, repacked with a valid CRC: reaches the checks."""
    members = {f"{k}.npy": v for k, v in probe_members().items()}
    members[f"{member}.npy"] = data.draw(mutations(members[f"{member}.npy"]))
    fuzz_check(load_probes, _zip(members, zipfile.ZIP_DEFLATED), "fm.npz")


@FUZZ
@given(data=st.sampled_from(ACTUAL_SEEDS).flatmap(mutations))
def test_fuzz_actual(data: bytes) -> None:
    fuzz_check(_read_actual, data, "fa.out")


@FUZZ
@given(data=mutations(SUMMARY_SEED))
def test_fuzz_summary(data: bytes) -> None:
    fuzz_check(load_summary, data, "fs.json")
