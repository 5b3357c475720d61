"""Corpus cases of issue 21 ("Trust, round 3"): torch.save archives that hide or repeat
members, CSV files Excel writes (a byte-order mark) or whose header looks like an index,
merge summaries that contradict themselves, and ``--raw`` rows longer than memory. Registered
into :mod:`corpus.make_corpus` on import, like its own cases.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from corpus import make_corpus
from corpus.make_corpus import RATIO, RATIO_JSON, npy, zip_bytes
from corpus.readers_cases import _pt, _q_tensor, _records

SKIP = (*RATIO, "--skip-unreadable")


def case(category: str, file: str, *args: Any, **kw: Any) -> Any:
    """:func:`corpus.make_corpus.case` with the file named ``trust3_<category>_<file>``."""
    return make_corpus.case(category, f"trust3_{category}_{file}", *args, **kw)


# --------------------------------------------------------------------------- torch.save


@case(
    "torch",
    "npz_polyglot.pt",
    RATIO,
    2,
    "[archive/hidden.npy]: a zip member that is not part of torch.save's format",
    also=[(SKIP, 1, "SKIPPED (unreadable, not analysed): archive/hidden.npy")],
)
def pt_npz_polyglot(path: Path) -> None:
    """A torch.save archive with one more member, an .npy holding q = 1e-12: numpy.load reads
    the file as an .npz with that member too (before: ignored, exit 0)."""
    members = _records({"q": _q_tensor()[:3]})
    members.append(("archive/hidden.npy", npy(np.array([1e-12], np.float32))))
    path.write_bytes(zip_bytes(members))


@case(
    "torch",
    "orphan_record.pt",
    RATIO,
    2,
    "[archive/data/7]: a storage record no tensor of the pickle refers to",
    also=[(SKIP, 1, "SKIPPED (unreadable, not analysed): archive/data/7")],
)
def pt_orphan_record(path: Path) -> None:
    members = _records({"q": _q_tensor()[:3]})
    members.append(("archive/data/7", np.array([1e-12], np.float32).tobytes()))
    path.write_bytes(zip_bytes(members))


@case("torch", "two_pickles.pt", RATIO, 2, "two zip entries named 'archive/data.pkl'")
def pt_two_pickles(path: Path) -> None:
    """A second, 2 MiB data.pkl after the small one (torch reads the later one)."""
    members = _records({"q": _q_tensor()})
    members.append(("archive/data.pkl", b"\x80\x02" + b"N" * ((2 << 20) - 2)))
    with _quiet():
        path.write_bytes(zip_bytes(members))


@case("torch", "big_endian.pt", RATIO, 2, "written on a big-endian machine")
def pt_big_endian(path: Path) -> None:
    """The byteorder record says "big" (torch's meta loader crashed on it: exit 139)."""
    members = [
        (n, b"big" if n.endswith("/byteorder") else d) for n, d in _records({"q": _q_tensor()})
    ]
    path.write_bytes(zip_bytes(members))


@case(
    "torch",
    "aliased.pt",
    RATIO_JSON,
    1,
    '"violations": 400',
    json_checks=[("summary.count", 1600)],
)
def pt_aliased(path: Path) -> None:
    """One storage under 400 names (and as a transposed view): read from the file once."""
    t = _q_tensor()
    obj: dict[str, Any] = {f"t{i}": t for i in range(399)}
    obj["t399"] = t.reshape(2, 2).t()
    path.write_bytes(_pt(obj))


class _quiet:
    """zipfile warns about a duplicate name when writing one on purpose."""

    def __enter__(self) -> None:
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: object) -> None:
        self._w.__exit__(*exc)


# --------------------------------------------------------------------------- CSV


@case("csv", "bom.csv", RATIO_JSON, 1, '"violations": 1', json_checks=[("summary.count", 2)])
def csv_bom(path: Path) -> None:
    """Excel's "CSV UTF-8": a BOM, then a violating first row (before: taken as a header)."""
    path.write_bytes(b"\xef\xbb\xbf1e-9\n1.0\n")


@case(
    "csv",
    "index_header.csv",
    (*RATIO_JSON, "--column", "1"),
    1,
    '"violations": 1',
    json_checks=[("layers.0.name", "x")],
    also=[((*RATIO, "--column", "name:1"), 0, "PASS")],
)
def csv_index_header(path: Path) -> None:
    """A header named like an index: ``--column 1`` is the second column (which violates)."""
    path.write_bytes(b"1,x\n1.0,1e-9\n")


@case("csv", "latin1_late.csv", RATIO, 2, "line 3002: not UTF-8 text")
def csv_latin1_late(path: Path) -> None:
    path.write_bytes(b"a\n" + b"1\n" * 3000 + b"caf\xe9\n")


@case("csv", "many_columns.csv", RATIO, 2, "line 1: 2000000 columns, over the 65536")
def csv_many_columns(path: Path) -> None:
    """2 million columns (before: never finished, 760 MiB)."""
    path.write_bytes(b"1," * 1999999 + b"1\n")


@case("csv", "wide.csv", RATIO, 1, "4000 layer(s)")
def csv_wide(path: Path) -> None:
    """4,000 columns of 50 rows: parsed once (before: once per column, 75 s at 1,000 rows)."""
    row = ",".join(["1.0"] * 3999 + ["1e-9"]) + "\n"
    path.write_text(row * 50)


# --------------------------------------------------------------------------- merge

MERGE = ("merge", "{file}")


def _violating_summary() -> dict[str, Any]:
    """The summary of a dump whose q = 1e-9 violates the bound (the merge FAILs on it)."""
    import tempfile

    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.merge import summary_document

    with tempfile.TemporaryDirectory() as tmp:
        q = Path(tmp) / "q.npy"
        q.write_bytes(npy(np.array([1e-9, 1.0, 2.0], np.float32)))
        doc = summary_document(analyze_dump(q, 1e-5))
    doc["source"] = "q.npy"
    return doc


def _write_json(path: Path, doc: Any) -> None:
    import json

    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")


@case("merge", "below_bound_zero.json", MERGE, 2, "[layers[0].below_bound]: below_bound 0")
def merge_below_bound_zero(path: Path) -> None:
    """below_bound edited to 0 (before: merge PASSed, exit 0)."""
    doc = _violating_summary()
    doc["layers"][0]["below_bound"] = 0
    _write_json(path, doc)


@case("merge", "min_ratio_edited.json", MERGE, 2, "[min_ratio]: min_ratio 1e-12 contradicts delta")
def merge_min_ratio_edited(path: Path) -> None:
    doc = _violating_summary()
    doc["min_ratio"] = 1e-12
    for layer in doc["layers"]:
        layer["below_bound"] = 0
    _write_json(path, doc)


@case("merge", "duplicate_key.json", MERGE, 2, "duplicate key 'below_bound'")
def merge_duplicate_key(path: Path) -> None:
    import json

    text = json.dumps(_violating_summary())
    path.write_text(text.replace('"below_bound": 1', '"below_bound": 1, "below_bound": 0'))


@case("merge", "long_worst.json", MERGE, 2, "[layers[0].worst]: 3 worst inputs listed; top_k 2")
def merge_long_worst(path: Path) -> None:
    """A worst list longer than top_k (merge held every shard's whole list)."""
    doc = _violating_summary()
    doc["top_k"] = 2
    _write_json(path, doc)


@case("merge", "digits_400.json", MERGE, 2, "expected a finite number, got an integer of 400")
def merge_digits_400(path: Path) -> None:
    doc = _violating_summary()
    doc["layers"][0]["eps"] = 10**399
    _write_json(path, doc)


@case(
    "merge",
    "shape_2e62.json",
    ("merge", "{file}", "{file}"),
    2,
    "the merged layer would hold more than 9223372036854775807 values",
)
def merge_shape_2e62(path: Path) -> None:
    """Two shards of 2**62 zeros: their concatenation overflows int64 (before: internal error)."""
    doc = _violating_summary()
    big = 2**62
    layer = doc["layers"][0]
    layer.update(shape=[big], count=big, zero=big, decades=[], min_q=0.0, max_q=0.0)
    layer.update(below_bound=0, worst=[], min_pos_q=None)  # zero vectors: apart, not listed
    layer.update(nan=0, inf=0, nonfinite_examples=[])
    _write_json(path, doc)


# --------------------------------------------------------------------------- work that grew


@case(
    "torch",
    "one_tensor_1000_names.pt",
    RATIO_JSON,
    1,
    '"violations": 1000',
    json_checks=[("summary.count", 1000 << 20)],
)
def pt_one_tensor_1000_names(path: Path) -> None:
    """One 4 MiB tensor under 1,000 names: read and analysed once, each name reported (before:
    analysed 1,000 times, 4 GB of work for a 4 MiB file)."""
    import torch

    t = torch.ones(1 << 20, dtype=torch.float32)
    t[5] = 1e-12
    path.write_bytes(_pt({f"model.layers.{i}.norm": t for i in range(1000)}))


@case(
    "npz",
    "fortran_deflated_rows.npz",
    (*RATIO_JSON, "--raw"),
    1,
    '"violations": 1',
    json_checks=[("summary.count", 1 << 23)],
)
def npz_fortran_deflated_rows(path: Path) -> None:
    """A deflated Fortran-order --raw member of 2^23 rows (four blocks of 2^21 rows): 64 MiB
    decompressed once into a temporary file (before: once per block)."""
    x = np.ones((1 << 23, 2), np.float32, order="F")
    x[7] = 1e-9
    path.write_bytes(zip_bytes([("x.npy", npy(x))], zipfile.ZIP_DEFLATED, level=1))
