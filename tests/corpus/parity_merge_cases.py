"""Corpus cases for the readers of ``parity`` (probe files, implementation outputs in .npy,
.npz and .safetensors, acceptance-record targets), ``probe --gain FILE`` and ``merge`` (shard
summaries). Registered into :mod:`corpus.make_corpus` on import, like its own cases.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import tempfile
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from corpus import make_corpus
from corpus.make_corpus import (
    _mkdir,
    _mkfifo,
    _q_values,
    _raw_zip,
    deflated_bomb,
    npy,
    npy_with_header,
    pickled_object_npy,
    zip_bytes,
)

PROBES = "valid_probes.npz"
ACTUAL = "valid_actual.npy"
SUMMARY = "valid_summary.json"
DIM = 8
PARITY = ("parity", "--probes", "{dir}/" + PROBES, "--actual", "{file}")
PARITY_PROBES = ("parity", "--probes", "{file}", "--actual", "{dir}/" + ACTUAL)
PARITY_RECORD = (*PARITY[:4], "{dir}/" + ACTUAL, "--record", "{file}")
GAIN = (
    "probe",
    "--dim",
    str(DIM),
    "--eps",
    "1e-5",
    "--gain",
    "{file}",
    "--save-data",
    "{file}.out.npz",
)
MERGE = ("merge", "{file}")
MERGE_TWO = ("merge", "{dir}/" + SUMMARY, "{file}")


_SHARED = (PROBES, ACTUAL, SUMMARY)


def case(category: str, file: str, *args: Any, **kw: Any) -> Any:
    """:func:`corpus.make_corpus.case` with the file named ``<category>_<file>``: every corpus
    file lives in one directory, and the other readers' cases use names like these."""
    return make_corpus.case(
        category, file if file in _SHARED else f"{category}_{file}", *args, **kw
    )


# --------------------------------------------------------------------------- valid seeds


@cache
def probe_set() -> Any:
    """The probe set every parity case uses: d = 8, eps 1e-5, float32 (same bytes every run)."""
    from rmsnorm_eps.parity.probes import make_probes

    return make_probes(DIM, 1e-5)


def rows() -> int:
    return int(probe_set().count)


@cache
def probe_members() -> dict[str, bytes]:
    """The probe file's members (name without .npy -> .npy bytes), to edit one at a time."""
    import io

    from rmsnorm_eps.parity.probe_file import probe_bytes

    with zipfile.ZipFile(io.BytesIO(probe_bytes(probe_set()))) as zf:
        return {n[: -len(".npy")]: zf.read(n) for n in zf.namelist()}


def probe_zip(**change: bytes | None) -> bytes:
    """The valid probe file with members replaced (bytes) or removed (None)."""
    members = dict(probe_members())
    for key, value in change.items():
        if value is None:
            del members[key]
        else:
            members[key] = value
    return zip_bytes([(f"{k}.npy", v) for k, v in members.items()], zipfile.ZIP_DEFLATED)


def with_metadata(**change: object) -> bytes:
    meta = dict(probe_set().metadata())
    meta.update(change)
    return npy(np.array(json.dumps(meta, sort_keys=True)))


def reference_outputs(dtype: str = "float32") -> np.ndarray:
    return np.asarray(probe_set().reference).astype(dtype)


@case("valid", PROBES, PARITY_PROBES, 0, "PASS: all 9 categories within tolerance")
def valid_probes(path: Path) -> None:
    from rmsnorm_eps.parity.probe_file import probe_bytes

    path.write_bytes(probe_bytes(probe_set()))


@case("valid", ACTUAL, PARITY, 0, "PASS: all 9 categories within tolerance")
def valid_actual(path: Path) -> None:
    path.write_bytes(npy(reference_outputs()))


# --------------------------------------------------------------------------- safetensors


def safetensors(
    tensors: dict[str, Any] | None,
    data: bytes = b"",
    *,
    raw: bytes | None = None,
    n: int | None = None,
) -> bytes:
    """A .safetensors file: 8-byte little-endian header length, JSON header, data. ``raw``
    replaces the header text; ``n`` lies about its length."""
    header = raw if raw is not None else json.dumps(tensors).encode()
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def _f32_tensor(
    name: str = "y", shape: tuple[int, ...] | None = None
) -> tuple[dict[str, Any], bytes]:
    out = reference_outputs()
    shp = list(out.shape if shape is None else shape)
    data = out.tobytes()
    return {name: {"dtype": "F32", "shape": shp, "data_offsets": [0, len(data)]}}, data


@case(
    "safetensors",
    "valid_f32.safetensors",
    PARITY,
    0,
    "PASS: all 9 categories within tolerance",
)
def st_valid_f32(path: Path) -> None:
    path.write_bytes(safetensors(*_f32_tensor()))


@case(
    "safetensors",
    "valid_bf16.safetensors",
    (*PARITY, "--format", "json"),
    0,
    "PASS: all 9 categories within tolerance",
    json_checks=[("output_dtype", "bfloat16")],
)
def st_valid_bf16(path: Path) -> None:
    """bfloat16 is valid (ml_dtypes widens it exactly); the CLI failed on it before."""
    import ml_dtypes

    data = reference_outputs().astype(ml_dtypes.bfloat16).tobytes()
    shape = [rows(), DIM]
    path.write_bytes(
        safetensors({"y": {"dtype": "BF16", "shape": shape, "data_offsets": [0, len(data)]}}, data)
    )


@case(
    "safetensors",
    "header_past_end.safetensors",
    PARITY,
    2,
    "safetensors header declares 1048576 bytes, but the file holds",
)
def st_header_past_end(path: Path) -> None:
    path.write_bytes(safetensors(*_f32_tensor(), n=1 << 20))


@case(
    "safetensors",
    "header_length_2e64.safetensors",
    PARITY,
    2,
    "safetensors header declares 18446744073709551615 bytes",
)
def st_header_length_max(path: Path) -> None:
    path.write_bytes(safetensors(*_f32_tensor(), n=2**64 - 1))


@case("safetensors", "overlapping.safetensors", PARITY, 2, "[b]: its bytes overlap tensor 'a'")
def st_overlapping(path: Path) -> None:
    tensors, data = _f32_tensor("a")
    tensors["b"] = dict(tensors["a"])  # the same bytes claimed twice
    path.write_bytes(safetensors(tensors, data))


@case(
    "safetensors",
    "offset_past_end.safetensors",
    PARITY,
    2,
    "[y]: invalid data_offsets [0, 1099511627776]: the data buffer holds",
)
def st_offset_past_end(path: Path) -> None:
    tensors, data = _f32_tensor()
    tensors["y"]["data_offsets"] = [0, 1 << 40]
    path.write_bytes(safetensors(tensors, data))


@case("safetensors", "unknown_dtype.safetensors", PARITY, 2, "[y]: unknown safetensors dtype 'Q4'")
def st_unknown_dtype(path: Path) -> None:
    tensors, data = _f32_tensor()
    tensors["y"]["dtype"] = "Q4"
    path.write_bytes(safetensors(tensors, data))


@case("safetensors", "int32.safetensors", PARITY, 2, "[y]: unsupported dtype int32")
def st_int32(path: Path) -> None:
    tensors, data = _f32_tensor()
    tensors["y"]["dtype"] = "I32"
    path.write_bytes(safetensors(tensors, data))


@case("safetensors", "header_not_json.safetensors", PARITY, 2, "invalid JSON in safetensors header")
def st_not_json(path: Path) -> None:
    path.write_bytes(safetensors(None, b"\x00" * 8, raw=b"{not json: at all}"))


@case(
    "safetensors",
    "header_not_object.safetensors",
    PARITY,
    2,
    "invalid safetensors header: expected an object, got list",
)
def st_not_object(path: Path) -> None:
    path.write_bytes(safetensors(None, raw=b"[1, 2, 3]"))


@case("safetensors", "header_nan.safetensors", PARITY, 2, "NaN is not valid JSON")
def st_nan(path: Path) -> None:
    _, data = _f32_tensor()
    raw = b'{"y": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}'
    path.write_bytes(safetensors(None, data, raw=raw))


@case(
    "safetensors",
    "header_deep.safetensors",
    PARITY,
    2,
    "invalid safetensors header: nested too deeply",
)
def st_deep(path: Path) -> None:
    path.write_bytes(safetensors(None, raw=b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))


#: Header sizes: just over the 4 MiB the reader accepts (the dump readers' one cap, refused
#: unread), and just under it (parsed: the memory worst case of this reader).
HUGE_HEADER = (4 << 20) + 1024
LARGE_HEADER = (4 << 20) - 1024


def _metadata_header(size: int) -> bytes:
    head, tail = b'{"__metadata__": {"pad": "', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


@case("safetensors", "header_huge.safetensors", PARITY, 2, "over the 4 MiB this reader accepts")
def st_header_huge(path: Path) -> None:
    path.write_bytes(safetensors(None, raw=_metadata_header(HUGE_HEADER)))


@case(
    "safetensors", "header_large.safetensors", PARITY, 2, "the .safetensors file holds no tensors"
)
def st_header_large(path: Path) -> None:
    path.write_bytes(safetensors(None, raw=_metadata_header(LARGE_HEADER)))


@case(
    "safetensors",
    "wrong_shape.safetensors",
    PARITY,
    2,
    f"[y]: outputs have shape (3, {DIM}), the probes need",
)
def st_wrong_shape(path: Path) -> None:
    out = reference_outputs()[:3]
    data = out.tobytes()
    path.write_bytes(
        safetensors(
            {"y": {"dtype": "F32", "shape": [3, DIM], "data_offsets": [0, len(data)]}}, data
        )
    )


@case(
    "safetensors",
    "shape_not_data.safetensors",
    PARITY,
    2,
    "[y]: shape (33, 8) of F32 needs 1056 bytes, data_offsets give 1024",
)
def st_shape_not_data(path: Path) -> None:
    path.write_bytes(safetensors(*_f32_tensor(shape=(rows() + 1, DIM))))


# --------------------------------------------------------------------------- parity --actual


@case("actual", "pickle_object.npy", PARITY, 2, "holds Python objects", marker="PWNED_actual")
def actual_pickle(path: Path) -> None:
    path.write_bytes(pickled_object_npy("PWNED_actual"))


@case("actual", "wrong_shape.npy", PARITY, 2, f"outputs have shape (3, {DIM}), the probes need")
def actual_wrong_shape(path: Path) -> None:
    path.write_bytes(npy(reference_outputs()[:3]))


@case("actual", "truncated.npy", PARITY, 2, "truncated: header declares shape")
def actual_truncated(path: Path) -> None:
    path.write_bytes(npy(reference_outputs())[:-7])


@case("actual", "int64.npy", PARITY, 2, "unsupported dtype int64")
def actual_int(path: Path) -> None:
    path.write_bytes(npy(np.zeros((rows(), DIM), np.int64)))


@case(
    "actual",
    "nan_outputs.npy",
    (*PARITY, "--format", "json"),
    1,
    "FAIL",
    json_checks=[("verdict", "fail")],
)
def actual_nan(path: Path) -> None:
    out = reference_outputs()
    out[3, 2] = np.nan
    path.write_bytes(npy(out))


def signalling_nan_outputs() -> np.ndarray:
    """float32 outputs with one signalling NaN: widening it raised a RuntimeWarning."""
    out = reference_outputs()
    out.view(np.uint32)[5, 1] = 0x7FA00000
    return out


@case(
    "actual",
    "signalling_nan.npy",
    (*PARITY, "--format", "json"),
    1,
    "FAIL",
    json_checks=[("verdict", "fail")],
)
def actual_signalling_nan(path: Path) -> None:
    path.write_bytes(npy(signalling_nan_outputs()))


@case("safetensors", "signalling_nan.safetensors", PARITY, 1, "FAIL")
def st_signalling_nan(path: Path) -> None:
    data = signalling_nan_outputs().tobytes()
    shape = [rows(), DIM]
    path.write_bytes(
        safetensors({"y": {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]}}, data)
    )


@case("actual", "empty.npy", PARITY, 2, "empty file")
def actual_empty(path: Path) -> None:
    path.write_bytes(b"")


@case("actual", "garbage.bin", PARITY, 2, "not a .npy, .npz or .safetensors file")
def actual_garbage(path: Path) -> None:
    path.write_bytes(b"GGUF" + b"\x00" * 60)


@case("actual", "two_arrays.npz", PARITY, 2, "holds 2 arrays (a, b); choose one with --key")
def actual_two_arrays(path: Path) -> None:
    out = npy(reference_outputs())
    path.write_bytes(zip_bytes([("a.npy", out), ("b.npy", out)]))


@case("actual", "missing_key.npz", (*PARITY, "--key", "zz"), 2, "no array named 'zz'")
def actual_missing_key(path: Path) -> None:
    path.write_bytes(zip_bytes([("y.npy", npy(reference_outputs()))]))


#: 2**25 float64 zeros deflated: refused from its header (shape), never decompressed.
OUTPUT_BOMB = 2**25


@case(
    "actual",
    "zip_bomb.npz",
    PARITY,
    2,
    f"[bomb]: outputs have shape ({OUTPUT_BOMB},), the probes need",
)
def actual_zip_bomb(path: Path) -> None:
    header = npy_with_header(
        f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({OUTPUT_BOMB},), }}"
    )
    stream, crc, size = deflated_bomb(header, OUTPUT_BOMB * 8)
    path.write_bytes(_raw_zip("bomb.npy", stream, crc, size))


# --------------------------------------------------------------------------- parity --probes


@case(
    "probes",
    "pickled_metadata.npz",
    PARITY_PROBES,
    2,
    "[metadata]: cannot read without pickle",
    marker="PWNED_probes",
)
def probes_pickled_metadata(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=pickled_object_npy("PWNED_probes")))


@case("probes", "single_npy.npz", PARITY_PROBES, 2, "not a probe .npz file (a single .npy array)")
def probes_single_npy(path: Path) -> None:
    path.write_bytes(npy(_q_values()))


@case("probes", "not_zip.npz", PARITY_PROBES, 2, "not a probe .npz file (not a zip archive)")
def probes_not_zip(path: Path) -> None:
    path.write_bytes(b"probes? no")


@case("probes", "truncated.npz", PARITY_PROBES, 2, "not a probe .npz file (BadZipFile")
def probes_truncated(path: Path) -> None:
    path.write_bytes(probe_zip()[:200])


@case("probes", "metadata_not_json.npz", PARITY_PROBES, 2, "[metadata]: invalid JSON")
def probes_metadata_not_json(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=npy(np.array("{eps: 1e-5"))))


@case(
    "probes", "metadata_deep.npz", PARITY_PROBES, 2, "[metadata]: invalid JSON: nested too deeply"
)
def probes_metadata_deep(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=npy(np.array("[" * 100_000 + "]" * 100_000))))


@case("probes", "metadata_format.npz", PARITY_PROBES, 2, "not a rmsnorm-eps-probes/1 file")
def probes_metadata_format(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=with_metadata(format="rmsnorm-eps-probes/9")))


@case(
    "probes", "metadata_eps_string.npz", PARITY_PROBES, 2, "metadata field 'eps' missing or invalid"
)
def probes_metadata_eps_string(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=with_metadata(eps="1e-5")))


@case("probes", "metadata_eps_negative.npz", PARITY_PROBES, 2, "eps must be finite and > 0")
def probes_metadata_eps_negative(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=with_metadata(eps=-1e-5)))


@case(
    "probes",
    "metadata_huge_dim.npz",
    PARITY_PROBES,
    2,
    "over the 16777216 values read",
)
def probes_huge_dim(path: Path) -> None:
    path.write_bytes(probe_zip(metadata=with_metadata(dim=2**40)))


@case("probes", "metadata_huge_member.npz", PARITY_PROBES, 2, "[metadata]: member declares")
def probes_huge_metadata(path: Path) -> None:
    meta = dict(probe_set().metadata(), pad="x" * (2 << 20))
    path.write_bytes(probe_zip(metadata=npy(np.array(json.dumps(meta)))))


def _deflate(data: bytes) -> bytes:
    import zlib

    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    return comp.compress(data) + comp.flush()


def deflated_zip(members: list[tuple[str, bytes, int, int]]) -> bytes:
    """A zip of already deflated members (name, raw deflate stream, CRC-32, expanded size):
    zipfile would have to inflate a bomb to write it."""
    local = bytearray()
    central = bytearray()
    for name, stream, crc, size in members:
        raw = name.encode()
        offset = len(local)
        local += struct.pack(
            "<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 33, crc, len(stream), size, len(raw), 0
        )
        local += raw + stream
        central += struct.pack(
            "<4s6H3L5H2L",
            b"PK\x01\x02",
            20,
            20,
            0,
            8,
            0,
            33,
            crc,
            len(stream),
            size,
            len(raw),
            0,
            0,
            0,
            0,
            0o644 << 16,
            offset,
        )
        central += raw
    n = len(members)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(central), len(local), 0)
    return bytes(local + central + end)


#: The probe bomb: an ``inputs`` member of 2**25 float64 zeros (256 MiB) deflated to 260 KiB.
PROBE_BOMB = 2**25


@case(
    "probes",
    "inputs_zip_bomb.npz",
    PARITY_PROBES,
    2,
    f"[inputs]: member declares {PROBE_BOMB * 8 + 128} bytes",
)
def probes_inputs_bomb(path: Path) -> None:
    """Refused from the zip directory (its size is not what the metadata implies), before
    numpy decompresses it."""
    import zlib

    header = npy_with_header(
        f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({PROBE_BOMB},), }}"
    )
    stream, crc, size = deflated_bomb(header, PROBE_BOMB * 8)
    members = [
        (f"{k}.npy", _deflate(v), zlib.crc32(v), len(v))
        for k, v in probe_members().items()
        if k != "inputs"
    ]
    members.append(("inputs.npy", stream, crc, size))
    path.write_bytes(deflated_zip(members))


@case("probes", "inputs_float32.npz", PARITY_PROBES, 2, "[inputs]: expected float64, got float32")
def probes_inputs_float32(path: Path) -> None:
    path.write_bytes(probe_zip(inputs=npy(np.asarray(probe_set().inputs, np.float32))))


@case("probes", "reference_nan.npz", PARITY_PROBES, 2, "[reference]: holds NaN or inf")
def probes_reference_nan(path: Path) -> None:
    ref = np.array(probe_set().reference)
    ref[1, 1] = np.nan
    path.write_bytes(probe_zip(reference=npy(ref)))


@case("probes", "category_range.npz", PARITY_PROBES, 2, "[category]: category index out of range")
def probes_category_range(path: Path) -> None:
    cat = np.array(probe_set().category)
    cat[0] = 99
    path.write_bytes(probe_zip(category=npy(cat)))


@case("probes", "missing_member.npz", PARITY_PROBES, 2, "[reference]: missing array")
def probes_missing_member(path: Path) -> None:
    path.write_bytes(probe_zip(reference=None))


@case("probes", "q_negative.npz", PARITY_PROBES, 2, "float64 values >= 0")
def probes_q_negative(path: Path) -> None:
    q = np.array(probe_set().q)
    q[2] = -1.0
    path.write_bytes(probe_zip(q=npy(q)))


# --------------------------------------------------------------------------- probe --gain FILE


@case("gain", "gain_pickle.npy", GAIN, 2, "holds Python objects", marker="PWNED_gain")
def gain_pickle(path: Path) -> None:
    path.write_bytes(pickled_object_npy("PWNED_gain"))


@case("gain", "gain_shape.npy", GAIN, 2, f"gain has shape (3,), expected ({DIM},)")
def gain_shape(path: Path) -> None:
    path.write_bytes(npy(np.ones(3, np.float32)))


@case("gain", "gain_nan.npy", GAIN, 2, "gain holds NaN or inf")
def gain_nan(path: Path) -> None:
    g = np.ones(DIM, np.float32)
    g[2] = np.inf
    path.write_bytes(npy(g))


@case("gain", "gain_two.npz", GAIN, 2, "holds 2 arrays; a gain file holds one")
def gain_two(path: Path) -> None:
    g = npy(np.ones(DIM, np.float32))
    path.write_bytes(zip_bytes([("a.npy", g), ("b.npy", g)]))


@case("gain", "gain_huge_shape.npy", GAIN, 2, "truncated: header declares shape")
def gain_huge_shape(path: Path) -> None:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    path.write_bytes(npy_with_header(header, b"\x00" * 32))


# --------------------------------------------------------------------------- --record targets


@case("record", "a_record_dir.yaml", PARITY_RECORD, 2, "is a directory")
def record_directory(path: Path) -> None:
    _mkdir(path)


@case("record", "a_record_fifo.yaml", PARITY_RECORD, 2, "is a FIFO with no reader")
def record_fifo(path: Path) -> None:
    """Writing a FIFO in place waits for a reader: with none, parity used to hang."""
    _mkfifo(path)


@case("record", "record.txt", PARITY_RECORD, 2, "must end in .yaml, .yml, .json or .md")
def record_suffix(path: Path) -> None:
    """Nothing is created: the suffix is refused before anything is read or written."""


# --------------------------------------------------------------------------- merge summaries


@cache
def summary_doc(eps: float = 1e-5) -> dict[str, Any]:
    """The summary of the corpus's valid dump (``ratio --save-summary``) at ``eps``, source made
    relative."""
    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.merge import summary_document

    with tempfile.TemporaryDirectory() as tmp:
        q = Path(tmp) / "q.npz"
        q.write_bytes(zip_bytes([("model.norm.npy", npy(_q_values().astype(np.float32)))]))
        doc = summary_document(analyze_dump(q, eps))
    doc["source"] = "valid_q.npz"
    return doc


def _summary(edit: Callable[[dict[str, Any]], object] | None = None) -> str:
    doc = copy.deepcopy(summary_doc())
    if edit is not None:
        edit(doc)
    return json.dumps(doc, indent=1)


def _layer(**change: object) -> Callable[[dict[str, Any]], object]:
    return lambda doc: doc["layers"][0].update(change)


def _top(**change: object) -> Callable[[dict[str, Any]], object]:
    return lambda doc: doc.update(change)


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


@case("merge", SUMMARY, MERGE, 0, "PASS: 0 violation(s)")
def merge_valid(path: Path) -> None:
    _write(path, _summary())


@case("merge", "not_json.json", MERGE, 2, "not a JSON summary (Expecting value")
def merge_not_json(path: Path) -> None:
    _write(path, "count: 3\n")


@case("merge", "not_object.json", MERGE, 2, "[schema]: not an rmsnorm-eps summary")
def merge_not_object(path: Path) -> None:
    _write(path, "[1, 2, 3]")


@case("merge", "wrong_schema.json", MERGE, 2, "[schema]: not an rmsnorm-eps summary")
def merge_wrong_schema(path: Path) -> None:
    _write(path, _summary(_top(schema="rmsnorm-eps-report")))


@case("merge", "schema_version_99.json", MERGE, 2, "unsupported summary version 99")
def merge_schema_version(path: Path) -> None:
    _write(path, _summary(_top(schema_version=99)))


@case(
    "merge",
    "decades_do_not_add_up.json",
    MERGE,
    2,
    "[layers[0].decades]: zero + decade counts = 2, but count - nan - inf = 3",
)
def merge_decades(path: Path) -> None:
    _write(path, _summary(lambda d: d["layers"][0]["decades"].pop()))


@case(
    "merge",
    "below_over_count.json",
    MERGE,
    2,
    "below_bound 1000 exceeds the 3 finite values",
)
def merge_below_over(path: Path) -> None:
    _write(path, _summary(_layer(below_bound=1000)))


@case("merge", "count_mismatch.json", MERGE, 2, "count 7 does not match shape [1, 3]")
def merge_count_mismatch(path: Path) -> None:
    _write(path, _summary(_layer(count=7)))


@case("merge", "negative_count.json", MERGE, 2, "[layers[0].nan]: expected an integer >= 0")
def merge_negative(path: Path) -> None:
    _write(path, _summary(_layer(nan=-1)))


@case("merge", "nan_literal.json", MERGE, 2, "not a JSON summary (NaN is not valid JSON)")
def merge_nan_literal(path: Path) -> None:
    text = _summary(_layer(min_q="NAN_HERE"))
    _write(path, text.replace('"NAN_HERE"', "NaN"))


@case("merge", "huge_float.json", MERGE, 2, "[layers[0].eps]: expected a finite number, got inf")
def merge_huge_float(path: Path) -> None:
    _write(path, _summary().replace('"eps": 1e-05', '"eps": 1e999'))


@case("merge", "huge_count.json", MERGE, 2, "[layers[0].shape]: expected a list of sizes (int64)")
def merge_huge_count(path: Path) -> None:
    _write(path, _summary(_layer(shape=[2**70, 3], count=3 * 2**70)))


@case("merge", "overlong_int.json", MERGE, 2, "Exceeds the limit (4300 digits)")
def merge_overlong_int(path: Path) -> None:
    _write(path, _summary().replace('"top_k": 5', '"top_k": 1' + "0" * 5000))


@case("merge", "layers_not_list.json", MERGE, 2, "[layers]: expected a non-empty list")
def merge_layers_not_list(path: Path) -> None:
    _write(path, _summary(_top(layers={"model.norm": {}})))


@case("merge", "index_out_of_range.json", MERGE, 2, "within shape [1, 3], got [0, 9]")
def merge_index_range(path: Path) -> None:
    _write(path, _summary(lambda d: d["layers"][0]["worst"][0].update(index=[0, 9])))


@case("merge", "worst_unsorted.json", MERGE, 2, "[layers[0].worst]: expected at most 3 q values")
def merge_worst_unsorted(path: Path) -> None:
    _write(path, _summary(lambda d: d["layers"][0]["worst"].reverse()))


@case("merge", "eps_zero.json", MERGE, 2, "[layers[0].eps]: eps must be a finite number > 0")
def merge_eps_zero(path: Path) -> None:
    _write(path, _summary(_layer(eps=0.0)))


@case("merge", "delta_out_of_range.json", MERGE, 2, "[delta]: expected a number in (0, 1)")
def merge_delta(path: Path) -> None:
    _write(path, _summary(_top(delta=5.0)))


@case("merge", "eps_mismatch.json", MERGE_TWO, 2, "[model.norm]: eps 1e-06 differs from 1e-05")
def merge_eps_mismatch(path: Path) -> None:
    """A valid summary on its own (exit 1: eps 1e-6 makes no q violate); merged with the
    valid one, the shards disagree on eps. (Made at eps 1e-6: an eps edited into a summary
    contradicts its own histogram, and is refused before the shards are compared.)"""
    _write(path, json.dumps(summary_doc(1e-06), indent=1))


@case("merge", "deep_nesting.json", MERGE, 2, "not a JSON summary (nested too deeply)")
def merge_deep(path: Path) -> None:
    _write(path, '{"layers": ' + "[" * 100_000 + "]" * 100_000 + "}")


#: The "100 MB string" case: refused from its size (the limit is 64 MiB), never parsed.
BIG_STRING = 100_000_000


@case("merge", "huge_string.json", MERGE, 2, "summary too large (100000")
def merge_huge_string(path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"schema": "rmsnorm-eps-summary", "source": "')
        block = "x" * (1 << 20)
        for _ in range(BIG_STRING >> 20):
            fh.write(block)
        fh.write("x" * (BIG_STRING % (1 << 20)))
        fh.write('"}')


@case("merge", "a_summary_dir.json", MERGE, 2, "is a directory")
def merge_directory(path: Path) -> None:
    os.mkdir(path)
