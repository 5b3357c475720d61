"""Corpus cases for the dump readers of ``ratio``/``compare`` added after .npy/.npz: safetensors
dumps, torch.save files and CSV/TSV columns, and a file in no accepted format. Registered into
:mod:`corpus.make_corpus` on import, like its own cases.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from corpus import make_corpus
from corpus.make_corpus import COMPARE, RATIO, RATIO_JSON, _Payload, zip_bytes

SKIP = (*RATIO, "--skip-unreadable")


def case(category: str, file: str, *args: Any, **kw: Any) -> Any:
    """:func:`corpus.make_corpus.case` with the file named ``dump_<category>_<file>``."""
    return make_corpus.case(category, f"dump_{category}_{file}", *args, **kw)


# --------------------------------------------------------------------------- safetensors


def _st(header: bytes | dict[str, Any], data: bytes = b"", n: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if n is None else n) + text + data


def _ent(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


_Q = np.array([1e-3, 2e-3, 1.0, 1e-9], np.float32)  # the last one violates the bound
_QB = _Q.tobytes()  # 16 bytes


@case(
    "safetensors",
    "valid.safetensors",
    RATIO_JSON,
    1,
    '"violations": 1',
    json_checks=[("summary.count", 8), ("layers.1.name", "b")],
    also=[(COMPARE, 1, "b")],
)
def st_dump_valid(path: Path) -> None:
    header = {"__metadata__": {"format": "pt"}, "a": _ent("F32", [4], 0, 16)}
    header["b"] = _ent("F32", [2, 2], 16, 32)
    path.write_bytes(_st(header, _QB + _QB))


@case("safetensors", "length_2e64.safetensors", RATIO, 2, "declares 18446744073709551615 bytes")
def st_dump_length(path: Path) -> None:
    path.write_bytes(_st({"a": _ent("F32", [4], 0, 16)}, _QB, n=2**64 - 1))


@case("safetensors", "duplicate_key.safetensors", RATIO, 2, "duplicate key 'a'")
def st_dump_duplicate(path: Path) -> None:
    raw = b'{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "a": {}}'
    path.write_bytes(_st(raw, _QB))


@case(
    "safetensors",
    "overlap.safetensors",
    RATIO,
    2,
    "[b]: its bytes overlap tensor 'a'",
    also=[(SKIP, 1, "SKIPPED (unreadable, not analysed): b")],
)
def st_dump_overlap(path: Path) -> None:
    header = {"a": _ent("F32", [4], 0, 16), "b": _ent("F32", [2], 8, 16)}
    path.write_bytes(_st(header, _QB))


@case(
    "safetensors", "huge_shape.safetensors", RATIO, 2, "[a]: shape (1099511627776, 1099511627776)"
)
def st_dump_huge_shape(path: Path) -> None:
    path.write_bytes(_st({"a": _ent("F32", [1 << 40, 1 << 40], 0, 16)}, _QB))


@case("safetensors", "past_end.safetensors", RATIO, 2, "[a]: invalid data_offsets [0, 17]")
def st_dump_past_end(path: Path) -> None:
    path.write_bytes(_st({"a": _ent("F32", [4], 0, 17)}, _QB))


@case("safetensors", "q4.safetensors", RATIO, 2, "[a]: unknown safetensors dtype 'Q4'")
def st_dump_unknown_dtype(path: Path) -> None:
    path.write_bytes(_st({"a": _ent("Q4", [4], 0, 16)}, _QB))


@case(
    "safetensors",
    "int16.safetensors",
    RATIO,
    2,
    "pass --dtype bfloat16",
    also=[((*RATIO, "--dtype", "bfloat16"), 1, "1 violation(s)")],
)
def st_dump_int16(path: Path) -> None:
    bits = (_Q.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)  # bfloat16, truncated
    path.write_bytes(_st({"a": _ent("I16", [4], 0, 8)}, bits.tobytes()))


@case("safetensors", "metadata_int.safetensors", RATIO, 2, "__metadata__ must map strings")
def st_dump_metadata(path: Path) -> None:
    path.write_bytes(_st({"__metadata__": {"n": 1}, "a": _ent("F32", [4], 0, 16)}, _QB))


@case("safetensors", "deep.safetensors", RATIO, 2, "safetensors header")
def st_dump_deep(path: Path) -> None:
    path.write_bytes(_st(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", _QB))


@case("safetensors", "many_entries.safetensors", RATIO, 2, "[t0]: unknown safetensors dtype")
def st_dump_many_entries(path: Path) -> None:
    """A header just under the 4 MiB cap with 60,000 entries (the first one bad)."""
    entries = [
        b'"t%d": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}' % i for i in range(60_000)
    ]
    raw = b"{" + b", ".join(entries) + b"}"
    assert (3 << 20) < len(raw) < 4 << 20
    path.write_bytes(_st(raw, b"\x00" * 4))


@case("safetensors", "empty_lists.safetensors", RATIO, 2, "[a]: tensor entry must be an object")
def st_dump_empty_lists(path: Path) -> None:
    """A header just under the 4 MiB cap of 1.4 million empty lists: the most Python objects
    per byte of JSON, the memory worst case of parsing it."""
    path.write_bytes(_st(b'{"a": [' + b",".join([b"[]"] * 1_398_000) + b"]}", b"\x00" * 4))


@case("safetensors", "header_5mib.safetensors", RATIO, 2, "over the 4 MiB this reader accepts")
def st_dump_header_over_cap(path: Path) -> None:
    path.write_bytes(_st(b'{"a": "' + b"x" * (5 << 20) + b'"}'))


# --------------------------------------------------------------------------- torch.save


def _pt(obj: object) -> bytes:
    """torch.save bytes of ``obj`` with its random serialization id replaced by zeros (and the
    CRC-32 fields of that record fixed), so the corpus is the same on every build. torch is
    installed wherever the corpus is built (the ``torch`` extra of the test environment)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = bytearray(buf.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(".data/serialization_id"))
    at = info.header_offset
    name_len, extra_len = struct.unpack("<HH", data[at + 26 : at + 30])
    start = at + 30 + name_len + extra_len
    new = b"0" * info.file_size
    data[start : start + info.file_size] = new
    old_crc, new_crc = struct.pack("<I", info.CRC), struct.pack("<I", zlib.crc32(new))
    assert bytes(data).count(old_crc) in (2, 3)  # local header, (descriptor,) central directory
    return bytes(data).replace(old_crc, new_crc)


def _records(obj: object) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(_pt(obj))) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def _q_tensor() -> Any:
    import torch

    return torch.from_numpy(_Q.copy())


@case(
    "torch",
    "valid.pt",
    RATIO_JSON,
    1,
    '"violations": 1',
    json_checks=[("summary.count", 8), ("layers.1.name", "model.norm.1")],
    also=[(COMPARE, 1, "model.norm.1")],
)
def pt_valid(path: Path) -> None:
    path.write_bytes(_pt({"model": {"norm": [_q_tensor(), _q_tensor().reshape(2, 2)]}}))


@case(
    "torch",
    "pickle_payload.pt",
    RATIO,
    2,
    "its pickle needs 'io.open', which torch's weights-only loader refuses",
    marker="PWNED_pt",
    also=[(SKIP, 2, "not a readable torch.save file")],
)
def pt_payload(path: Path) -> None:
    path.write_bytes(_pt({"q": _q_tensor(), "evil": _Payload("PWNED_pt")}))


@case(
    "torch",
    "not_tensor.pt",
    RATIO,
    2,
    "[epoch]: not a tensor (int)",
    also=[(SKIP, 1, "SKIPPED (unreadable, not analysed): epoch")],
)
def pt_not_tensor(path: Path) -> None:
    path.write_bytes(_pt({"epoch": 3, "q": _q_tensor()}))


@case("torch", "truncated.pt", RATIO, 2, "not a readable torch.save archive")
def pt_truncated(path: Path) -> None:
    data = _pt({"q": _q_tensor()})
    path.write_bytes(data[: len(data) // 2])


@case("torch", "short_record.pt", RATIO, 2, "[q]: truncated: shape (4,) of float32")
def pt_short_record(path: Path) -> None:
    """The zip directory says the storage record holds 8 of the 16 bytes the tensor needs."""
    data = _pt({"q": _q_tensor()})
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("/data/0"))
    sizes = struct.pack("<II", info.compress_size, info.file_size)
    assert data.count(sizes) >= 2
    path.write_bytes(data.replace(sizes, struct.pack("<II", 8, 8)))


@case("torch", "rezipped.pt", RATIO, 2, "[q]: storage 'archive/data/0': its record is compressed")
def pt_rezipped(path: Path) -> None:
    """Re-zipped with compression (torch.save stores its records)."""
    path.write_bytes(zip_bytes(_records({"q": _q_tensor()}), zipfile.ZIP_DEFLATED))


@case("torch", "big_pickle.pt", RATIO, 2, "data.pkl of 2097152 bytes is over the 256 KiB")
def pt_big_pickle(path: Path) -> None:
    path.write_bytes(zip_bytes([("archive/data.pkl", b"\x80\x02" + b"N" * ((2 << 20) - 2))]))


@case(
    "torch",
    "many_ints.pt",
    RATIO,
    2,
    "[x]: not a tensor (list)",
    also=[(SKIP, 1, "SKIPPED (unreadable, not analysed): x")],
)
def pt_many_ints(path: Path) -> None:
    """A data.pkl near the 256 KiB cap holding 80,000 integers in lists: one entry."""
    path.write_bytes(_pt({"q": _q_tensor(), "x": [list(range(1000)) for _ in range(80)]}))


@case("torch", "many_tensors.pt", RATIO, 2, "[first]: not a tensor (int)")
def pt_many_tensors(path: Path) -> None:
    """3,000 tensors (data.pkl near the cap): the memory worst case of loading the pickle."""
    import torch

    obj: dict[str, object] = {"first": 1}
    obj.update({f"t{i}": torch.zeros(1) for i in range(3000)})
    path.write_bytes(_pt(obj))


@case(
    "torch",
    "shared_lists.pt",
    RATIO,
    2,
    "a second reference to a container",
    also=[(SKIP, 1, "SKIPPED")],
)
def pt_shared(path: Path) -> None:
    """One list referenced twice at each of 60 levels: 2**60 paths if walked naively."""
    level: list[object] = [_q_tensor()]
    for _ in range(60):
        level = [level, level]
    path.write_bytes(_pt({"x": level}))


@case(
    "torch",
    "int16_view.pt",
    RATIO,
    2,
    "pass --dtype bfloat16",
    also=[((*RATIO, "--dtype", "bfloat16"), 1, "1 violation(s)")],
)
def pt_int16(path: Path) -> None:
    import torch

    path.write_bytes(_pt({"q": _q_tensor().to(torch.bfloat16).view(torch.int16)}))


@case("torch", "strided.pt", RATIO, 2, "[q]: a non-contiguous tensor view")
def pt_strided(path: Path) -> None:
    import torch

    path.write_bytes(_pt({"q": torch.arange(16.0).reshape(4, 4)[:, 1]}))


@case("torch", "legacy.pt", RATIO, 2, "legacy non-zip torch.save file")
def pt_legacy(path: Path) -> None:
    path.write_bytes(b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19." + b"\x00" * 32)


# --------------------------------------------------------------------------- CSV / TSV


@case(
    "csv",
    "valid.csv",
    RATIO_JSON,
    1,
    '"nonfinite": 2',
    json_checks=[("summary.count", 6), ("layers.1.name", "b")],
)
def csv_valid(path: Path) -> None:
    path.write_bytes(b"a,b\n1e-3,nan\n2e-3,inf\n1.0,1e-9\n")


@case("csv", "empty_cell.csv", RATIO, 2, "line 3, column 2 ('b'): empty cell")
def csv_empty_cell(path: Path) -> None:
    path.write_bytes(b"a,b\n1,2\n3,\n")


@case("csv", "bad_cell.tsv", RATIO, 2, "line 2, column 1 ('a'): not a number: '1,5'")
def csv_bad_cell(path: Path) -> None:
    path.write_bytes(b"a\tb\n1,5\t2\n")


@case("csv", "ragged.csv", RATIO, 2, "line 3: 3 cells, the first row has 2")
def csv_ragged(path: Path) -> None:
    path.write_bytes(b"a,b\n1,2\n1,2,3\n")


@case("csv", "latin1.csv", RATIO, 2, "not UTF-8")
def csv_latin1(path: Path) -> None:
    path.write_bytes(b"caf\xe9\n1\n")


@case("csv", "huge_cell.csv", RATIO, 2, "field larger than field limit")
def csv_huge_cell(path: Path) -> None:
    path.write_bytes(b"a\n" + b"1" * (1 << 20) + b"\n")


@case("csv", "over_cap.csv", RATIO, 2, "over the 256 MiB read from a CSV/TSV file")
def csv_over_cap(path: Path) -> None:
    """A sparse file of 257 MiB (nothing in it is read)."""
    with open(path, "wb") as fh:
        fh.write(b"a\n" + b"1\n" * 512)
        fh.truncate(257 << 20)


@case("npy", "unknown_format.bin", RATIO, 2, "not a .npy or .npz, .safetensors, torch.save")
def unknown_format(path: Path) -> None:
    path.write_bytes(b"\x01\x02 not any dump format" + bytes(range(256)))
