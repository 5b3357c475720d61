"""Deterministic generator of the hostile-input corpus: broken, malicious and edge-case files
for every reader, each with the outcome the command line must give.

    python tests/corpus/make_corpus.py DEST     # writes the files and DEST/manifest.json

Nothing binary is committed: tests/test_hostile_corpus.py builds the corpus into a temporary
directory and runs every case through ``python -m rmsnorm_eps`` in a fresh process.

Adding a reader or a case: write a function ``def make(path: Path) -> None`` that creates the
file and decorate it with ``@case(category, name, argv, exit_code, message)``. ``argv`` uses
``{file}`` for the case's own path and ``{dir}`` for the corpus directory (commands run with
the corpus directory as working directory, so a pickle payload names its marker file
relatively and the corpus bytes do not depend on where it is built). The same file can serve
several commands: give ``also=[argv, ...]`` and each becomes its own case.
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

#: Fixed zip timestamp: np.savez stamps the current time, which would make the corpus differ
#: from run to run.
_DATE = (1980, 1, 1, 0, 0, 0)
RATIO = ("ratio", "--eps", "1e-5", "--q-file", "{file}")
RATIO_JSON = (*RATIO, "--format", "json")
COMPARE = ("compare", "--from", "eps=1e-5", "--to", "eps=1e-6", "--q-file", "{file}")
SHOW = ("config", "show", "{file}")
RATIO_CONFIG = ("ratio", "--config", "{file}", "--q-file", "{dir}/valid_q.npz")


@dataclass(frozen=True)
class Case:
    """One corpus file run through one command, and what must come out."""

    name: str  # unique id, e.g. "npy/pickle_object"
    category: str  # npy, npz, yaml, json, gguf, filesystem
    file: str  # the file (or directory, FIFO) name inside the corpus directory
    argv: tuple[str, ...]  # arguments after ``python -m rmsnorm_eps``
    exit_code: int  # 2: refused; 1: valid file whose data violate the gate; 0: clean
    message: str  # substring of the stderr line (exit 2) or of stderr + stdout (exit 0/1)
    marker: str | None = None  # a file a payload would create if it ran: must not appear
    json_checks: tuple[tuple[str, object], ...] = ()  # (dotted path, value) in --format json
    root_skips: bool = False  # permission checks do not apply to root


@dataclass
class _Spec:
    category: str
    file: str
    make: Callable[[Path], None]
    cases: list[Case] = field(default_factory=list)


_SPECS: list[_Spec] = []


def case(
    category: str,
    file: str,
    argv: Sequence[str],
    exit_code: int,
    message: str,
    *,
    marker: str | None = None,
    json_checks: Sequence[tuple[str, object]] = (),
    also: Sequence[tuple[Sequence[str], int, str]] = (),
    root_skips: bool = False,
) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    """Register ``make`` (which writes ``file``) with one case per command it is run through."""

    def register(make: Callable[[Path], None]) -> Callable[[Path], None]:
        spec = _Spec(category, file, make)
        runs = [(tuple(argv), exit_code, message), *((tuple(a), e, m) for a, e, m in also)]
        names: set[str] = set()
        for i, (args, code, msg) in enumerate(runs):
            suffix = "" if i == 0 else f"#{args[0]}{'-config' if '--config' in args else ''}"
            if suffix in names:  # the same command again (other options): numbered
                suffix += f"-{i}"
            names.add(suffix)
            spec.cases.append(
                Case(
                    name=f"{category}/{make.__name__}{suffix}",
                    category=category,
                    file=file,
                    argv=args,
                    exit_code=code,
                    message=msg,
                    marker=marker,
                    json_checks=tuple(json_checks) if i == 0 else (),
                    root_skips=root_skips,
                )
            )
        _SPECS.append(spec)
        return make

    return register


# --------------------------------------------------------------------------- writers


def npy(array: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def npy_with_header(header: str, data: bytes = b"", version: int = 1) -> bytes:
    """A .npy file with a literal header text (padded as numpy pads it)."""
    text = header.encode("latin1")
    prefix = 10 if version == 1 else 12
    pad = (-(prefix + len(text) + 1)) % 64
    text += b" " * pad + b"\n"
    size = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + size + text + data


def zip_bytes(
    members: Sequence[tuple[str, bytes]], method: int = zipfile.ZIP_STORED, level: int = 6
) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.compress_type = method
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, compresslevel=level if method else None)
    return buf.getvalue()


class _Payload:
    """Unpickling this calls ``open(name, "w")``: the marker file appears if code runs."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def pickled_object_npy(marker: str) -> bytes:
    arr = np.empty(1, dtype=object)
    arr[0] = _Payload(marker)
    return npy(arr, allow_pickle=True)


def gguf_bytes(
    kvs: Sequence[tuple[str, int, bytes]],
    tensors: Sequence[tuple[str, tuple[int, ...], int, bytes]] = (),
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
) -> bytes:
    """A GGUF file: ``kvs`` are (key, value type id, encoded value); tensors (name, dims,
    ggml type, data). Counts can be overridden to lie."""
    out = bytearray(b"GGUF" + struct.pack("<I", version))
    out += struct.pack(
        "<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    for key, vtype, value in kvs:
        out += gg_str(key) + struct.pack("<I", vtype) + value
    offset = 0
    for name, dims, ttype, data in tensors:
        out += (
            gg_str(name)
            + struct.pack("<I", len(dims))
            + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", ttype, offset)
        )
        offset += len(data) + (-len(data)) % 32
    out += b"\x00" * ((-len(out)) % 32)
    for _, _, _, data in tensors:
        out += data + b"\x00" * ((-len(data)) % 32)
    return bytes(out)


def gg_str(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


GG_U32, GG_F32, GG_STRING, GG_ARRAY, GG_U8 = 4, 6, 8, 9, 0


KV = tuple[str, int, bytes]


def gguf_model(eps_kv: KV | None = None, extra: Sequence[KV] = ()) -> list[KV]:
    """Metadata of a small llama GGUF (eps 1e-5 as float32), optionally with more keys."""
    kvs = [
        ("general.architecture", GG_STRING, gg_str("llama")),
        ("general.name", GG_STRING, gg_str("corpus")),
        ("llama.embedding_length", GG_U32, struct.pack("<I", 8)),
    ]
    kvs.append(
        eps_kv or ("llama.attention.layer_norm_rms_epsilon", GG_F32, struct.pack("<f", 1e-5))
    )
    return kvs + list(extra)


def _q_values() -> np.ndarray:
    """Three rows of q: q/eps at eps=1e-5 is 100, 200, 1e5 (all pass the default bound)."""
    return np.array([[1e-3, 2e-3, 1.0]], dtype=np.float64)


# --------------------------------------------------------------------------- helper files


@case("valid", "valid_q.npz", RATIO, 0, "PASS: 0 violation(s)")
def valid_dump(path: Path) -> None:
    """The dump `ratio --config` cases read (and a clean run of the corpus harness)."""
    path.write_bytes(zip_bytes([("model.norm.npy", npy(_q_values().astype(np.float32)))]))


# --------------------------------------------------------------------------- .npy


@case(
    "npy",
    "pickle_object.npy",
    RATIO,
    2,
    "holds Python objects",
    marker="PWNED_npy",
    also=[(COMPARE, 2, "holds Python objects")],
)
def pickle_object(path: Path) -> None:
    path.write_bytes(pickled_object_npy("PWNED_npy"))


@case("npy", "header_is_code.npy", RATIO, 2, "malformed .npy header", marker="PWNED_header")
def header_is_code(path: Path) -> None:
    path.write_bytes(npy_with_header("__import__('os').system('touch PWNED_header')"))


@case("npy", "truncated_header.npy", RATIO, 2, "truncated .npy header")
def truncated_header(path: Path) -> None:
    path.write_bytes(npy(_q_values())[:30])


@case(
    "npy",
    "truncated_data.npy",
    RATIO,
    2,
    "truncated: header declares shape (1, 3)",
    also=[(COMPARE, 2, "truncated: header declares shape (1, 3)")],
)
def truncated_data(path: Path) -> None:
    path.write_bytes(npy(_q_values())[:-5])


@case(
    "npy", "huge_shape.npy", RATIO, 2, "truncated: header declares shape (1099511627776, 1048576)"
)
def huge_shape(path: Path) -> None:
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776, 1048576), }"
    path.write_bytes(npy_with_header(header, b"\x00" * 64))


@case("npy", "header_too_large.npy", RATIO, 2, ".npy header too large")
def header_too_large(path: Path) -> None:
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31) + b"{" * 64)


@case("npy", "bad_version.npy", RATIO, 2, "unsupported .npy format version 9")
def bad_version(path: Path) -> None:
    path.write_bytes(b"\x93NUMPY\x09\x00" + npy(_q_values())[8:])


@case("npy", "header_not_dict.npy", RATIO, 2, "malformed .npy header (keys)")
def header_not_dict(path: Path) -> None:
    path.write_bytes(npy_with_header("['<f8', False, (3,)]", b"\x00" * 24))


@case("npy", "wrong_magic.npy", RATIO, 2, "unrecognised magic bytes")
def wrong_magic(path: Path) -> None:
    path.write_bytes(b"\x93NUMPX" + npy(_q_values())[6:])


@case("npy", "empty_file.npy", RATIO, 2, "empty file")
def empty_file(path: Path) -> None:
    path.write_bytes(b"")


@case(
    "npy",
    "big_endian.npy",
    RATIO_JSON,
    0,
    "PASS: 0 violation(s)",
    json_checks=[("layers.0.min_q", 1e-3), ("layers.0.max_q", 1.0), ("layers.0.count", 3)],
)
def big_endian(path: Path) -> None:
    path.write_bytes(npy(_q_values().astype(">f8")))


@case(
    "npy",
    "fortran_order.npy",
    RATIO_JSON,
    1,
    "FAIL: 1 violation(s)",
    json_checks=[
        ("layers.0.worst.0.index", [1, 0]),
        ("layers.0.worst.0.q", 1e-7),
        ("layers.0.count", 6),
    ],
)
def fortran_order(path: Path) -> None:
    q = np.array([[1.0, 2.0, 3.0], [1e-7, 5.0, 6.0]], dtype=">f8")  # big-endian too
    path.write_bytes(npy(np.asfortranarray(q)))


@case(
    "npy",
    "fortran_inf_raw.npy",
    (*RATIO_JSON, "--raw"),
    1,
    "FAIL: 1 violation(s)",
    # (1 + 4 + 9) / 3 computed on values scaled by the row maximum 3: one ulp under 14 / 3
    json_checks=[("layers.0.inf", 1), ("layers.0.count", 2), ("layers.0.min_q", 4.666666666666666)],
)
def fortran_inf_raw(path: Path) -> None:
    """Raw float64 activations in Fortran order, one row holding inf and 1e200: its squares
    overflow (q = inf, counted); numpy's overflow warning leaked to stderr before."""
    x = np.array([[1e200, np.inf, 1.0], [1.0, 2.0, 3.0]], np.float64)
    path.write_bytes(npy(np.asfortranarray(x)))


@case(
    "npy",
    "zero_d.npy",
    RATIO_JSON,
    0,
    "PASS: 0 violation(s)",
    json_checks=[("layers.0.count", 1), ("layers.0.shape", []), ("layers.0.min_q", 0.5)],
)
def zero_d(path: Path) -> None:
    path.write_bytes(npy(np.array(0.5, np.float32)))


@case("npy", "zero_d_raw.npy", (*RATIO, "--raw"), 2, "--raw needs activations")
def zero_d_raw(path: Path) -> None:
    path.write_bytes(npy(np.array(0.5, np.float32)))


@case(
    "npy",
    "empty_array.npy",
    RATIO,
    2,
    "empty array (shape (0, 4))",
    also=[(COMPARE, 2, "empty array")],
)
def empty_array(path: Path) -> None:
    path.write_bytes(npy(np.zeros((0, 4), np.float32)))


@case("npy", "int64.npy", RATIO, 2, "unsupported dtype int64")
def int64(path: Path) -> None:
    path.write_bytes(npy(np.arange(4, dtype=np.int64)))


@case("npy", "bool.npy", RATIO, 2, "unsupported dtype bool")
def bool_dtype(path: Path) -> None:
    path.write_bytes(npy(np.ones(4, bool)))


@case("npy", "complex.npy", RATIO, 2, "unsupported dtype complex128")
def complex_dtype(path: Path) -> None:
    path.write_bytes(npy(np.ones(4, np.complex128)))


@case("npy", "structured.npy", RATIO, 2, "unsupported dtype structured")
def structured(path: Path) -> None:
    path.write_bytes(npy(np.zeros(3, dtype=[("q", "<f8"), ("pos", "<i4")])))


@case("npy", "unicode.npy", RATIO, 2, "unsupported dtype <U4")
def unicode_dtype(path: Path) -> None:
    path.write_bytes(npy(np.array(["abcd"])))


@case(
    "npy",
    "nan_inf.npy",
    RATIO_JSON,
    1,
    "(0 below q/eps 49.2512562814, 2 nonfinite)",
    json_checks=[("layers.0.nan", 1), ("layers.0.inf", 1), ("layers.0.count", 4)],
    also=[(COMPARE, 1, "2 nonfinite")],
)
def nan_inf(path: Path) -> None:
    path.write_bytes(npy(np.array([1.0, np.nan, np.inf, 2.0], np.float32)))


@case(
    "npy",
    "negative_q.npy",
    RATIO,
    2,
    "negative q -0.5 at index [2]",
    also=[(COMPARE, 2, "negative q -0.5")],
)
def negative_q(path: Path) -> None:
    path.write_bytes(npy(np.array([1.0, 2.0, -0.5], np.float64)))


# --------------------------------------------------------------------------- .npz


def _member(name: str, array: np.ndarray) -> tuple[str, bytes]:
    return name, npy(array)


@case("npz", "pickled_member.npz", RATIO, 2, "[evil]: holds Python objects", marker="PWNED_npz")
def pickled_member(path: Path) -> None:
    path.write_bytes(
        zip_bytes([_member("ok.npy", _q_values()), ("evil.npy", pickled_object_npy("PWNED_npz"))])
    )


#: The bomb: 2**25 float64 zeros (256 MiB expanded) deflated to about 260 KiB.
BOMB_VALUES = 2**25


@case("npz", "zip_bomb.npz", RATIO, 0, f"{BOMB_VALUES} zero vector(s), output 0 under any eps")
def zip_bomb(path: Path) -> None:
    """Honest sizes, huge expansion: must be streamed in bounded memory (all q = 0: zero
    vectors, counted apart: exit 0)."""
    header = npy_with_header(
        f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({BOMB_VALUES},), }}"
    )
    stream, crc, size = deflated_bomb(header, BOMB_VALUES * 8)
    path.write_bytes(_raw_zip("bomb.npy", stream, crc, size))


def deflated_bomb(header: bytes, zero_bytes: int) -> tuple[bytes, int, int]:
    """``header`` then ``zero_bytes`` zeros as one raw deflate stream, with its CRC-32 and
    expanded size. The header is deflated and fully flushed (byte-aligned, no history), then
    the zeros are a stream of their own, deflated once per size in a process: each bomb costs
    the deflation of 256 MiB of zeros once, not once per file and per build."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = comp.compress(header) + comp.flush(zlib.Z_FULL_FLUSH)
    size = len(header) + zero_bytes
    return head + _deflated_zeros(zero_bytes), _crc_after(header, zero_bytes), size


@cache
def _deflated_zeros(zero_bytes: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = bytes(1 << 20)
    assert zero_bytes % len(block) == 0
    return b"".join(comp.compress(block) for _ in range(zero_bytes >> 20)) + comp.flush()


@cache
def _crc_after(header: bytes, zero_bytes: int) -> int:
    """CRC-32 of ``header`` followed by ``zero_bytes`` zeros."""
    crc, block = zlib.crc32(header), bytes(1 << 20)
    for _ in range(zero_bytes >> 20):
        crc = zlib.crc32(block, crc)
    return crc


def _raw_zip(name: str, deflated: bytes, crc: int, size: int) -> bytes:
    """A one-member zip from an already deflated stream (zipfile would inflate it to write)."""
    raw = name.encode()
    dos_time, dos_date = 0, (0 << 9) | (1 << 5) | 1
    local = (
        struct.pack(
            "<4s5H3L2H",
            b"PK\x03\x04",
            20,
            0,
            8,
            dos_time,
            dos_date,
            crc,
            len(deflated),
            size,
            len(raw),
            0,
        )
        + raw
    )
    central = (
        struct.pack(
            "<4s6H3L5H2L",
            b"PK\x01\x02",
            20,
            20,
            0,
            8,
            dos_time,
            dos_date,
            crc,
            len(deflated),
            size,
            len(raw),
            0,
            0,
            0,
            0,
            0o644 << 16,
            0,
        )
        + raw
    )
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(deflated), 0
    )
    return local + deflated + central + end


@case(
    "npz",
    "compressed_valid.npz",
    RATIO_JSON,
    0,
    "PASS: 0 violation(s)",
    json_checks=[("layers.0.count", 1 << 20), ("layers.0.min_q", 1.0)],
    also=[(COMPARE, 0, "PASS: 0 violation(s)")],
)
def compressed_valid(path: Path) -> None:
    q = 1.0 + (np.arange(1 << 20) % 1000).astype(np.float32)
    path.write_bytes(zip_bytes([_member("layers.0.norm.npy", q)], zipfile.ZIP_DEFLATED))


@case("npz", "lying_member_size.npz", RATIO, 2, "truncated: header declares shape (1000,)")
def lying_member_size(path: Path) -> None:
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000,), }"
    path.write_bytes(zip_bytes([("x.npy", npy_with_header(header, b"\x00" * 80))]))


@case("npz", "member_longer_than_header.npz", RATIO, 2, "its header declares")
def member_longer_than_header(path: Path) -> None:
    path.write_bytes(zip_bytes([("x.npy", npy(_q_values()) + b"\x00" * 16)]))


@case("npz", "duplicate_names.npz", RATIO, 2, "duplicate member 'a.npy'")
def duplicate_names(path: Path) -> None:
    import warnings

    with warnings.catch_warnings():  # zipfile warns "Duplicate name"
        warnings.simplefilter("ignore")
        path.write_bytes(zip_bytes([_member("a.npy", _q_values()), _member("a.npy", _q_values())]))


@case("npz", "non_npy_member.npz", RATIO, 2, "member 'README.txt' is not a .npy array")
def non_npy_member(path: Path) -> None:
    path.write_bytes(zip_bytes([_member("a.npy", _q_values()), ("README.txt", b"hello")]))


@case("npz", "empty_archive.npz", RATIO, 2, "holds no arrays")
def empty_archive(path: Path) -> None:
    path.write_bytes(zip_bytes([]))


@case("npz", "truncated_zip.npz", RATIO, 2, "not a readable .npz archive")
def truncated_zip(path: Path) -> None:
    path.write_bytes(zip_bytes([_member("a.npy", _q_values())])[:100])


@case("npz", "bad_crc.npz", RATIO, 2, "Bad CRC-32")
def bad_crc(path: Path) -> None:
    data = bytearray(zip_bytes([_member("a.npy", _q_values())]))
    data[30 + len("a.npy") + 128 + 3] ^= 0xFF  # inside the stored float data
    path.write_bytes(bytes(data))


@case("npz", "encrypted_member.npz", RATIO, 2, "[a]: cannot read member: File")
def encrypted_member(path: Path) -> None:
    data = bytearray(zip_bytes([_member("a.npy", _q_values())]))
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # set the "encrypted" flag bit
        at = data.index(sig) + (6 if sig == b"PK\x03\x04" else 8)
        data[at] |= 1
    path.write_bytes(bytes(data))


@case(
    "npz",
    "unknown_compression.npz",
    RATIO,
    2,
    "[a]: cannot read member: That compression method is not supported",
)
def unknown_compression(path: Path) -> None:
    data = bytearray(zip_bytes([_member("a.npy", _q_values())]))
    for sig, off in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        at = data.index(sig) + off
        data[at : at + 2] = struct.pack("<H", 99)
    path.write_bytes(bytes(data))


@case("npz", "companion_float.npz", RATIO, 2, "companion array has dtype float64")
def companion_float(path: Path) -> None:
    path.write_bytes(
        zip_bytes([_member("n.npy", _q_values()), _member("n::position.npy", _q_values())])
    )


@case("npz", "companion_orphan.npz", RATIO, 2, "companion array without its layer 'm'")
def companion_orphan(path: Path) -> None:
    path.write_bytes(
        zip_bytes(
            [_member("n.npy", _q_values()), _member("m::position.npy", np.zeros((1, 3), np.int64))]
        )
    )


@case("npz", "companion_shape.npz", RATIO, 2, "companion array has shape (2,)")
def companion_shape(path: Path) -> None:
    path.write_bytes(
        zip_bytes(
            [_member("n.npy", _q_values()), _member("n::position.npy", np.zeros(2, np.int64))]
        )
    )


@case(
    "npz",
    "one_bad_member.npz",
    RATIO,
    2,
    "[b]: truncated: header declares",
    also=[
        ((*RATIO, "--skip-unreadable"), 1, "skipped 1 unreadable layer(s)"),
        ((*COMPARE, "--skip-unreadable"), 1, "skipped 1 unreadable layer(s)"),
    ],
)
def one_bad_member(path: Path) -> None:
    """Nothing skipped silently: exit 2, unless --skip-unreadable (then listed, exit 1)."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000,), }"
    path.write_bytes(
        zip_bytes([_member("a.npy", _q_values()), ("b.npy", npy_with_header(header, b"\x00" * 80))])
    )


# --------------------------------------------------------------------------- YAML


def _yaml(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


_YAML_OK = "schema_version: 1\ndefaults: {eps: 1e-5, placement: inside, gain: w, norm: rms}\n"


@case(
    "yaml",
    "python_object.yaml",
    SHOW,
    2,
    "invalid YAML",
    marker="PWNED_yaml",
    also=[(RATIO_CONFIG, 2, "invalid YAML")],
)
def python_object(path: Path) -> None:
    _yaml(path, "schema_version: 1\nmodel: !!python/object/apply:os.system ['touch PWNED_yaml']\n")


@case("yaml", "python_name.yaml", SHOW, 2, "invalid YAML", marker="PWNED_yaml2")
def python_name(path: Path) -> None:
    _yaml(
        path,
        "schema_version: 1\nmodel: !!python/object/new:subprocess.Popen "
        "[['touch', 'PWNED_yaml2']]\n",
    )


@case(
    "yaml",
    "billion_laughs.yaml",
    SHOW,
    2,
    "[model]: expected a string",
    also=[(RATIO_CONFIG, 2, "expected a string")],
)
def billion_laughs(path: Path) -> None:
    """Ten anchors, each a list of nine aliases of the previous one: 9**9 * 9 "lol"s (3.9e9)
    once expanded, 1.2 KB on disk. Every reader must walk it without expanding it."""
    lines = ["schema_version: 1", "model:", "  - &a0 [" + ", ".join(["lol"] * 9) + "]"]
    for i in range(1, 10):
        lines.append(f"  - &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    _yaml(path, "\n".join(lines) + "\n")


@case("yaml", "deep_nesting.yaml", SHOW, 2, "invalid YAML: nested too deeply")
def deep_nesting(path: Path) -> None:
    _yaml(path, "schema_version: 1\nmodel: " + "[" * 50000 + "]" * 50000 + "\n")


@case("yaml", "eps_not_number.yaml", SHOW, 2, "[defaults.eps]: expected a number, got 'tiny'")
def eps_not_number(path: Path) -> None:
    _yaml(path, "schema_version: 1\ndefaults: {eps: tiny}\n")


@case("yaml", "eps_negative.yaml", SHOW, 2, "eps must be a finite number > 0, got -1e-05")
def eps_negative(path: Path) -> None:
    _yaml(path, "schema_version: 1\ndefaults: {eps: -1.0e-5}\n")


@case("yaml", "eps_huge_int.yaml", SHOW, 2, "eps must be a finite number > 0")
def eps_huge_int(path: Path) -> None:
    _yaml(path, "schema_version: 1\ndefaults: {eps: 1" + "0" * 400 + "}\n")


@case("yaml", "eps_overlong_int.yaml", SHOW, 2, "invalid YAML")
def eps_overlong_int(path: Path) -> None:
    _yaml(path, "schema_version: 1\ndefaults: {eps: 1" + "0" * 5000 + "}\n")


@case("yaml", "unknown_top_key.yaml", SHOW, 2, "unknown key 'epsilon'")
def unknown_top_key(path: Path) -> None:
    _yaml(path, _YAML_OK + "epsilon: 1e-5\n")


@case("yaml", "unknown_setting.yaml", SHOW, 2, "[defaults.epsilon]: unknown key 'epsilon'")
def unknown_setting(path: Path) -> None:
    _yaml(path, "schema_version: 1\ndefaults: {epsilon: 1e-5}\n")


@case("yaml", "duplicate_key.yaml", SHOW, 2, "[defaults.eps]: duplicate key (line 2)")
def duplicate_key(path: Path) -> None:
    _yaml(path, "schema_version: 1\ndefaults: {eps: 1e-5, eps: 1e-6}\n")


@case("yaml", "top_level_list.yaml", SHOW, 2, "expected a mapping at the top level")
def top_level_list(path: Path) -> None:
    _yaml(path, "- 1\n- 2\n")


@case("yaml", "not_utf8.yaml", SHOW, 2, "not UTF-8 text")
def not_utf8(path: Path) -> None:
    path.write_bytes(b"schema_version: 1\nmodel: \xff\xfe\n")


@case("yaml", "unhashable_key.yaml", SHOW, 2, "invalid YAML")
def unhashable_key(path: Path) -> None:
    _yaml(path, "schema_version: 1\n? [a, b]\n: 1\n")


# --------------------------------------------------------------------------- JSON (HF config)


@case("json", "not_object.json", SHOW, 2, "expected a JSON object at the top level")
def not_object(path: Path) -> None:
    path.write_text("[1, 2, 3]", encoding="utf-8")


@case(
    "json",
    "huge_float.json",
    SHOW,
    2,
    "[rms_norm_eps]: eps must be a finite number > 0",
    also=[(RATIO_CONFIG, 2, "eps must be a finite number > 0")],
)
def huge_float(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": 1e999}', encoding="utf-8")


@case("json", "huge_int.json", SHOW, 2, "[rms_norm_eps]: eps must be a finite number > 0")
def huge_int(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": 1' + "0" * 400 + "}", encoding="utf-8")


@case("json", "overlong_int.json", SHOW, 2, "invalid JSON")
def overlong_int(path: Path) -> None:
    path.write_text('{"model_type": "llama", "hidden_size": 1' + "0" * 5000 + "}", encoding="utf-8")


@case("json", "nan_literal.json", SHOW, 2, "invalid JSON: NaN is not valid JSON")
def nan_literal(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": NaN}', encoding="utf-8")


@case("json", "infinity_literal.json", SHOW, 2, "invalid JSON: -Infinity is not valid JSON")
def infinity_literal(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": -Infinity}', encoding="utf-8")


@case("json", "deep_nesting.json", SHOW, 2, "invalid JSON: nested too deeply")
def json_deep_nesting(path: Path) -> None:
    path.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}", encoding="utf-8")


@case("json", "eps_string.json", SHOW, 2, "[rms_norm_eps]: expected a number, got '1e-6'")
def eps_string(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": "1e-6"}', encoding="utf-8")


@case("json", "eps_bool.json", SHOW, 2, "[rms_norm_eps]: expected a number, got True")
def eps_bool(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": true}', encoding="utf-8")


@case("json", "truncated.json", SHOW, 2, "invalid JSON at line 1")
def truncated_json(path: Path) -> None:
    path.write_text('{"model_type": "llama", "rms_norm_eps": 1e-', encoding="utf-8")


# --------------------------------------------------------------------------- GGUF


@case("gguf", "valid.gguf", SHOW, 0, "default eps 9.999999747378752e-06")
def valid_gguf(path: Path) -> None:
    path.write_bytes(gguf_bytes(gguf_model()))


@case(
    "gguf",
    "truncated_metadata.gguf",
    SHOW,
    2,
    "truncated or malformed GGUF file",
    also=[(RATIO_CONFIG, 2, "truncated or malformed GGUF file")],
)
def truncated_metadata(path: Path) -> None:
    path.write_bytes(gguf_bytes(gguf_model())[:70])


@case("gguf", "absurd_kv_count.gguf", SHOW, 2, "18446744073709551615 key/value pairs")
def absurd_kv_count(path: Path) -> None:
    path.write_bytes(gguf_bytes(gguf_model(), n_kv=2**64 - 1))


@case("gguf", "absurd_tensor_count.gguf", SHOW, 2, "1152921504606846976 tensor descriptions")
def absurd_tensor_count(path: Path) -> None:
    path.write_bytes(gguf_bytes(gguf_model(), n_tensors=2**60))


@case("gguf", "absurd_string_length.gguf", SHOW, 2, "general.name: string declares")
def absurd_string_length(path: Path) -> None:
    kvs = gguf_model()
    kvs[1] = ("general.name", GG_STRING, struct.pack("<Q", 2**62) + b"corpus")
    path.write_bytes(gguf_bytes(kvs))


@case(
    "gguf",
    "absurd_array_length.gguf",
    SHOW,
    2,
    "tokenizer.ggml.tokens: arrays hold over 16777216 elements",
)
def absurd_array_length(path: Path) -> None:
    arr = struct.pack("<IQ", GG_U8, 2**40) + b"\x01" * 16
    path.write_bytes(gguf_bytes(gguf_model(extra=[("tokenizer.ggml.tokens", GG_ARRAY, arr)])))


@case("gguf", "absurd_string_array.gguf", SHOW, 2, "array of 1000000 string")
def absurd_string_array(path: Path) -> None:
    arr = struct.pack("<IQ", GG_STRING, 1_000_000) + gg_str("a") * 3
    path.write_bytes(gguf_bytes(gguf_model(extra=[("tokenizer.ggml.tokens", GG_ARRAY, arr)])))


@case("gguf", "vocab_memory.gguf", SHOW, 0, "default eps 9.999999747378752e-06")
def vocab_memory(path: Path) -> None:
    """4 MB of array elements: gguf.GGUFReader built an object per element (740 MB, 10 s)."""
    n = 4_000_000
    arr = struct.pack("<IQ", GG_U8, n) + b"\x01" * n
    path.write_bytes(gguf_bytes(gguf_model(extra=[("tokenizer.ggml.token_type", GG_ARRAY, arr)])))


@case("gguf", "eps_wrong_type.gguf", SHOW, 2, "eps must be stored as float32, got a GGUF string")
def eps_wrong_type(path: Path) -> None:
    path.write_bytes(
        gguf_bytes(
            gguf_model(("llama.attention.layer_norm_rms_epsilon", GG_STRING, gg_str("1e-5")))
        )
    )


@case("gguf", "eps_negative.gguf", SHOW, 2, "eps must be a finite number > 0")
def gguf_eps_negative(path: Path) -> None:
    path.write_bytes(
        gguf_bytes(
            gguf_model(("llama.attention.layer_norm_rms_epsilon", GG_F32, struct.pack("<f", -1e-5)))
        )
    )


@case("gguf", "bad_version.gguf", SHOW, 2, "unsupported GGUF version 99")
def gguf_bad_version(path: Path) -> None:
    path.write_bytes(gguf_bytes(gguf_model(), version=99))


@case("gguf", "duplicate_key.gguf", SHOW, 2, "duplicate key 'general.name'")
def gguf_duplicate_key(path: Path) -> None:
    kvs = gguf_model()
    path.write_bytes(gguf_bytes([*kvs, kvs[1]]))


@case("gguf", "unknown_value_type.gguf", SHOW, 2, "unknown value type 77")
def unknown_value_type(path: Path) -> None:
    path.write_bytes(gguf_bytes(gguf_model(extra=[("x", 77, b"\x00" * 8)])))


@case("gguf", "tensor_past_end.gguf", SHOW, 2, "data end at byte")
def tensor_past_end(path: Path) -> None:
    data = gguf_bytes(gguf_model(), [("blk.0.attn_norm.weight", (1024,), 0, b"\x00" * 4096)])
    path.write_bytes(data[:-2048])


# --------------------------------------------------------------------------- filesystem


def _mkdir(path: Path) -> None:
    path.mkdir()


def _mkfifo(path: Path) -> None:
    os.mkfifo(path)


@case(
    "filesystem",
    "a_directory.npz",
    RATIO,
    2,
    "is a directory",
    also=[
        (COMPARE, 2, "is a directory"),
        (SHOW, 2, "is a directory"),
        (RATIO_CONFIG, 2, "is a directory"),
    ],
)
def directory(path: Path) -> None:
    _mkdir(path)


@case(
    "filesystem",
    "a_fifo.npy",
    RATIO,
    2,
    "is not a regular file",
    also=[
        (COMPARE, 2, "is not a regular file"),
        (SHOW, 2, "is not a regular file"),
        (RATIO_CONFIG, 2, "is not a regular file"),
    ],
)
def fifo(path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: readers must stat first."""
    _mkfifo(path)


@case(
    "filesystem",
    "unreadable.npy",
    RATIO,
    2,
    "permission denied",
    root_skips=True,
    also=[(SHOW, 2, "permission denied")],
)
def unreadable(path: Path) -> None:
    path.write_bytes(npy(_q_values()))
    path.chmod(0)


@case(
    "filesystem",
    "with space ünïcødé q.npy",
    RATIO_JSON,
    0,
    "PASS: 0 violation(s)",
    json_checks=[("source", "{file}")],
)
def spaces_and_unicode(path: Path) -> None:
    path.write_bytes(npy(_q_values()))


@case(
    "filesystem",
    "bad naïve name with space.npz",
    RATIO,
    2,
    "bad naïve name with space.npz",
    also=[(SHOW, 2, "bad naïve name with space.npz")],
)
def broken_unicode_name(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04 not really a zip")


@case("filesystem", "missing.npy", RATIO, 2, "no such file", also=[(SHOW, 2, "no such file")])
def missing(path: Path) -> None:
    """Nothing is created: the file does not exist."""


# --------------------------------------------------------------------------- more readers

if __name__ != "__main__":  # as a script, main() imports this module properly first
    # each registers its cases on import
    from corpus import (  # noqa: F401
        issue12_cases,
        parity_merge_cases,
        readers_cases,  # safetensors, torch.save, CSV dumps
        trust3_cases,  # issue 21: hidden members, BOMs, contradicting summaries
    )

# --------------------------------------------------------------------------- build


def all_cases() -> list[Case]:
    return [c for spec in _SPECS for c in spec.cases]


def build(dest: Path) -> list[Case]:
    """Write every corpus file into ``dest`` (created) and return all cases."""
    dest.mkdir(parents=True, exist_ok=True)
    for spec in _SPECS:
        spec.make(dest / spec.file)
    return all_cases()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: make_corpus.py DEST", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    cases = build(dest)
    manifest = [
        {**c.__dict__, "argv": list(c.argv), "json_checks": list(c.json_checks)} for c in cases
    ]
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    print(f"{len(cases)} cases, {len(_SPECS)} files in {dest}")
    return 0


if __name__ == "__main__":
    # run as a script: import the package module (the cases of other files register there)
    sys.path[:0] = [
        str(Path(__file__).resolve().parents[1]),
        str(Path(__file__).resolve().parents[2]),
    ]
    from corpus.make_corpus import main as corpus_main

    raise SystemExit(corpus_main(sys.argv[1:]))
