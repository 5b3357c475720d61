"""Reader for GGUF metadata (llama.cpp's model format), parsed here in bounded memory.

Only the header is parsed: the key/value metadata and the tensor descriptions (names, shapes),
never the tensor data. Arrays in the metadata (a tokenizer's vocabulary and merges) are
skipped by their declared sizes without building one Python object per element, so the peak
memory does not grow with the vocabulary (``gguf.GGUFReader`` does build them: a 4 MB file
holding one array of a million bytes costs it about 740 MB and 10 s). Every length and count
is checked against the bytes left in the file before it is used, so a header that declares
more than the file holds is refused at once ("truncated or malformed GGUF file").

The header is read with positioned reads (``os.pread``) in windows of :data:`WINDOW_BYTES`,
never memory mapped: a mapped file that another process truncates while it is parsed raises
SIGBUS, which ends the process with nothing on stderr (Python cannot catch it). A read that
comes up short of the size the file had when opened, or a size changed by the end of the
parse, is the one-line error "file changed while being read" instead.

GGUF stores eps as float32: 1e-5 reads back as 9.999999747378752e-06. The stored value is kept
(compare with a relative tolerance, never ==) together with the shortest decimal that reads
back as the same float32 ("1e-05").
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.config.model import (
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
    missing,
)
from rmsnorm_eps.errors import InputFileError, brief

__all__ = [
    "GEMMA_ARCHS",
    "GGUF_MAGIC",
    "GgufMetadata",
    "read_gguf_config",
    "read_gguf_metadata",
    "short_float32",
]

GGUF_MAGIC = b"GGUF"
#: Architectures whose converter adds the Gemma +1 into the stored norm weights. Not gemma3n:
#: its norms multiply by w itself (transformers Gemma3nRMSNorm), and llama.cpp's
#: convert_hf_to_gguf.py Gemma3NModel uses norm_shift 0.0 (nothing added).
GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")
_LLAMA_CPP = "llama.cpp ggml_rms_norm: x / sqrt(mean(x^2) + eps)"

#: GGUF value types (gguf spec): id -> (name, struct code or None for string/array).
_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("uint8", "B"),
    1: ("int8", "b"),
    2: ("uint16", "H"),
    3: ("int16", "h"),
    4: ("uint32", "I"),
    5: ("int32", "i"),
    6: ("float32", "f"),
    7: ("bool", "?"),
    8: ("string", None),
    9: ("array", None),
    10: ("uint64", "Q"),
    11: ("int64", "q"),
    12: ("float64", "d"),
}
_STRING, _ARRAY = 8, 9
#: Limits that no real model file comes near (Llama 3: 128256 tokens, 280147 merges).
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 1 << 26
MAX_ARRAY_ELEMENTS = 1 << 24  # in all arrays of the file together
#: Key/value pairs and tensors a file may declare (real models: about 40 keys, a few
#: thousand tensors); the caps keep the peak memory bounded whatever a header declares.
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 16
#: Strings longer than this are skipped (value None, ``count`` their byte length); so are
#: all strings once this many bytes are held. The reader needs only short strings
#: (general.architecture, general.name); a chat template or license text is not kept.
MAX_KEPT_STRING = 1024
MAX_KEPT_STRING_TOTAL = 1 << 22
MAX_DIMS = 8
MAX_ARRAY_DEPTH = 4
#: The header is read this many bytes at a time (more only for one longer value: a key or
#: tensor name of at most :data:`MAX_KEY_BYTES`); skipped values are not read at all.
WINDOW_BYTES = 1 << 20


def short_float32(value: float) -> str:
    """The shortest decimal that reads back as the same float32 (9.999999747e-06 -> '1e-05')."""
    import numpy as np

    return str(np.float32(value))


@dataclass(frozen=True)
class GgufValue:
    """One metadata value: its GGUF type name and, for scalars and strings, the value.

    Arrays are not materialized: ``value`` is ``None`` and ``count`` their length. Nor are
    strings over :data:`MAX_KEPT_STRING` bytes: ``value`` None, ``count`` the byte length.
    """

    type: str
    value: Any
    count: int = 1


@dataclass(frozen=True)
class GgufMetadata:
    """The header of a GGUF file: metadata by key, and the shapes (ggml order) of the tensors of
    the first block (``blk.0.*``: per-head norm dims) and of the norm tensors outside blocks;
    the others are checked (extent within the file, no duplicate name) but not kept."""

    version: int
    fields: dict[str, GgufValue]
    tensor_shapes: dict[str, tuple[int, ...]]


class _Cursor:
    """Reads little- or big-endian values from an open file, checking every length first
    against the size the file had when opened (``size``) and reading only what is parsed."""

    def __init__(self, fd: int, size: int, path: Path) -> None:
        self.fd = fd
        self.size = size
        self.pos = 0
        self.path = path
        self.order = "<"
        self.elements = 0
        self._window = b""
        self._window_at = 0

    def changed(self, now: int) -> InputFileError:
        """The file no longer has the ``size`` bytes it had when opened: another process
        truncated (or replaced) it while it was read."""
        return InputFileError(
            self.path,
            f"file changed while being read: it had {self.size} bytes when opened, {now} at "
            f"byte {self.pos} of its GGUF header (was it rewritten or truncated by another "
            "process?)",
        )

    def take(self, n: int) -> tuple[bytes, int]:
        """A buffer holding the ``n`` bytes at ``pos`` (checked by :meth:`need`) and where
        they start in it; reads the next window when they are not in the current one."""
        at = self.pos - self._window_at
        if at >= 0 and at + n <= len(self._window):
            return self._window, at
        want = min(max(n, WINDOW_BYTES), self.size - self.pos)
        parts: list[bytes] = []
        got = 0
        while got < want:
            part = os.pread(self.fd, want - got, self.pos + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        if got < n:
            raise self.changed(self.pos + got)
        self._window = b"".join(parts)
        self._window_at = self.pos
        return self._window, 0

    def fail(self, problem: str) -> InputFileError:
        return InputFileError(self.path, f"truncated or malformed GGUF file ({problem})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise self.fail(
                f"{what} at offset {self.pos} needs {n} bytes, {self.size - self.pos} are left"
            )

    def scalar(self, code: str, what: str) -> Any:
        n = struct.calcsize(code)
        self.need(n, what)
        buf, at = self.take(n)
        (value,) = struct.unpack_from(self.order + code, buf, at)
        self.pos += n
        return value

    def length(self, what: str, limit: int = MAX_STRING_BYTES) -> int:
        """A string's length prefix, checked against ``limit`` and the bytes left."""
        n = self.scalar("Q", f"{what} length")
        if n > limit:
            raise self.fail(f"{what} declares {n} bytes (limit {limit})")
        self.need(n, what)
        return n

    def string(self, what: str, limit: int = MAX_STRING_BYTES) -> str:
        return self.text(self.length(what, limit), what)

    def text(self, n: int, what: str) -> str:
        """The next ``n`` bytes (checked by :meth:`length`) as UTF-8."""
        buf, at = self.take(n)
        raw = buf[at : at + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def value_type(self, what: str) -> int:
        t = self.scalar("I", what)
        if t not in _TYPES:
            raise self.fail(f"{what}: unknown value type {t}")
        return t

    def skip_array(self, key: str, depth: int) -> tuple[str, int]:
        """Skip an array value (type, count, elements); return (element type name, count)."""
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(f"{shorten(key)}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
        etype = self.value_type(f"{shorten(key)}: array element type")
        count = self.scalar("Q", f"{shorten(key)}: array length")
        self.elements += count
        if self.elements > MAX_ARRAY_ELEMENTS:
            raise self.fail(f"{shorten(key)}: arrays hold over {MAX_ARRAY_ELEMENTS} elements")
        name, code = _TYPES[etype]
        if code is not None:  # fixed size: one bounds check for the whole array
            self.need(count * struct.calcsize(code), f"{shorten(key)}: array of {count} {name}")
            self.pos += count * struct.calcsize(code)
            return name, count
        # strings need 8 bytes each at least, arrays 12: refuse an absurd count at once
        self.need(
            count * (8 if etype == _STRING else 12), f"{shorten(key)}: array of {count} {name}"
        )
        in_array = f"{shorten(key)}: string in array"
        for _ in range(count):
            if etype == _STRING:
                n = self.length(in_array, limit=1 << 64)  # no cap: skipped, not kept
                self.pos += n
            else:
                self.skip_array(key, depth + 1)
        return name, count


def read_gguf_metadata(path: Path) -> GgufMetadata:
    """Parse a GGUF header (versions 2 and 3, either byte order) without reading tensor data."""
    try:
        with open(path, "rb") as fh:
            fd = fh.fileno()
            size = os.fstat(fd).st_size
            if size == 0:
                raise InputFileError(path, "truncated or malformed GGUF file (empty)")
            cur = _Cursor(fd, size, path)
            meta = _parse(cur)
            now = os.fstat(fd).st_size
            if now != size:  # the tensor extents were checked against the old size
                raise cur.changed(now)
            return meta
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def _parse(cur: _Cursor) -> GgufMetadata:
    version, n_tensors, n_kv = _header(cur)
    fields = _fields(cur, n_kv)
    shapes, extents = _tensors(cur, n_tensors)
    _check_tensor_extents(cur, fields, extents)
    return GgufMetadata(version, fields, shapes)


def _header(cur: _Cursor) -> tuple[int, int, int]:
    """Magic, version (and byte order), tensor count and key/value count."""
    cur.need(4, "magic")
    buf, at = cur.take(4)
    if buf[at : at + 4] != GGUF_MAGIC:
        raise cur.fail("bad magic bytes, expected GGUF")
    cur.pos = 4
    version = cur.scalar("I", "version")
    if version & 0xFFFF == 0:  # written on a big-endian machine
        cur.order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise cur.fail(f"unsupported GGUF version {version}")
    n_tensors = cur.scalar("Q", "tensor count")
    n_kv = cur.scalar("Q", "key/value count")
    return version, n_tensors, n_kv


def _fields(cur: _Cursor, n_kv: int) -> dict[str, GgufValue]:
    """The ``n_kv`` metadata key/values (arrays skipped; long strings kept by length only)."""
    # a key/value needs 8 (key length) + 4 (type) + 1 bytes at least
    cur.need(n_kv * 13, f"{n_kv} key/value pairs")
    if n_kv > MAX_KV:
        raise cur.fail(f"{n_kv} key/value pairs declared (limit {MAX_KV})")
    fields: dict[str, GgufValue] = {}
    kept = 0
    for _ in range(n_kv):
        key = cur.string("key", MAX_KEY_BYTES)
        if key in fields:
            raise cur.fail(f"duplicate key {brief(key)}")
        t = cur.value_type(f"{shorten(key)}: value type")
        name, code = _TYPES[t]
        if t == _STRING:
            fields[key], n_kept = _string_value(cur, key, name, kept)
            kept += n_kept
        elif t == _ARRAY:
            etype, count = cur.skip_array(key, 1)
            fields[key] = GgufValue(f"array of {etype}", None, count)
        else:
            assert code is not None
            fields[key] = GgufValue(name, cur.scalar(code, key))
    return fields


def _string_value(cur: _Cursor, key: str, name: str, kept: int) -> tuple[GgufValue, int]:
    """A string value: kept whole while the strings kept so far stay within
    :data:`MAX_KEPT_STRING_TOTAL` (second item: the bytes kept), else skipped by length."""
    what = f"{shorten(key)}: string"
    n = cur.length(what)
    if n <= MAX_KEPT_STRING and kept + n <= MAX_KEPT_STRING_TOTAL:
        return GgufValue(name, cur.text(n, what)), n
    cur.pos += n
    return GgufValue(name, None, n), 0


#: Tensor name -> (ggml type, data offset, dims), for :func:`_check_tensor_extents`.
_Extents = dict[str, tuple[int, int, tuple[int, ...]]]


def _tensors(cur: _Cursor, n_tensors: int) -> tuple[dict[str, tuple[int, ...]], _Extents]:
    """The tensor descriptions: the shapes of norm tensors (block 0 and global ones) and every
    tensor's extent."""
    # a tensor needs 8 (name length) + 4 (dimension count) + 4 (type) + 8 (offset) bytes
    cur.need(n_tensors * 24, f"{n_tensors} tensor descriptions")
    if n_tensors > MAX_TENSORS:
        raise cur.fail(f"{n_tensors} tensor descriptions declared (limit {MAX_TENSORS})")
    shapes: dict[str, tuple[int, ...]] = {}
    extents: _Extents = {}
    for _ in range(n_tensors):
        tname = cur.string("tensor name", MAX_KEY_BYTES)
        n_dims = cur.scalar("I", f"tensor {brief(tname)}: dimension count")
        if n_dims > MAX_DIMS:
            raise cur.fail(f"tensor {brief(tname)} declares {n_dims} dimensions")
        dims = tuple(cur.scalar("Q", f"tensor {brief(tname)}: dimension") for _ in range(n_dims))
        ttype = cur.scalar("I", f"tensor {brief(tname)}: type")
        offset = cur.scalar("Q", f"tensor {brief(tname)}: offset")
        if tname in extents:
            raise cur.fail(f"duplicate tensor {brief(tname)}")
        if tname.startswith("blk.0.") or ("norm" in tname and not tname.startswith("blk.")):
            shapes[tname] = dims
        extents[tname] = (ttype, offset, dims)
    return shapes, extents


def _check_tensor_extents(cur: _Cursor, fields: dict[str, GgufValue], extents: _Extents) -> None:
    """Refuse a file whose tensor data would run past its end (a truncated download).

    Sizes come from the gguf package's table of ggml types when it is installed (block size,
    bytes per block); without it only the offsets are checked.
    """
    align_field = fields.get("general.alignment")
    align = 32
    if align_field is not None:
        if (
            align_field.type != "uint32"
            or align_field.value < 1
            or (align_field.value & (align_field.value - 1))
        ):
            raise cur.fail(f"general.alignment must be a uint32 power of two, got {align_field}")
        align = align_field.value
    start = -(-cur.pos // align) * align
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:  # pragma: no cover - the gguf package is optional
        sizes: dict[int, tuple[int, int]] = {}
    else:
        sizes = {int(GGMLQuantizationType(k)): v for k, v in GGML_QUANT_SIZES.items()}
    for tname, (ttype, offset, dims) in extents.items():
        n = math.prod(dims)
        block, type_size = sizes.get(ttype, (1, 0))
        if sizes and ttype not in sizes:
            raise cur.fail(f"tensor {brief(tname)} has unknown ggml type {ttype}")
        end = start + offset + n * type_size // block
        if end > cur.size:
            raise cur.fail(
                f"tensor {brief(tname)} data end at byte {end}, the file has {cur.size} bytes"
            )


def _eps_field(meta: GgufMetadata, key: str, path: Path) -> float | None:
    field = meta.fields.get(key)
    if field is None:
        return None
    if field.type not in ("float32", "float64"):
        raise InputFileError(
            path, f"eps must be stored as float32, got a GGUF {field.type}", key=key
        )
    value = float(field.value)
    if not value > 0.0 or value == float("inf"):
        raise InputFileError(path, f"eps must be a finite number > 0, got {value!r}", key=key)
    return value


_INT_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")


def read_gguf_config(path: Path) -> NormConfig:
    """Read the norm-relevant GGUF metadata into a :class:`NormConfig` (never tensor data)."""
    p = str(path)
    meta = read_gguf_metadata(path)
    arch_field = meta.fields.get("general.architecture")
    arch = arch_field.value if arch_field is not None and arch_field.type == "string" else None
    if not isinstance(arch, str) or not arch:
        raise InputFileError(path, "no general.architecture string", key="general.architecture")
    name_field = meta.fields.get("general.name")
    name = name_field.value if name_field is not None and name_field.type == "string" else None
    notes: list[str] = []
    settings: dict[str, Resolved] = {}
    rms_key = f"{arch}.attention.layer_norm_rms_epsilon"
    ln_key = f"{arch}.attention.layer_norm_epsilon"
    found = [
        (key, norm, v)
        for key, norm in ((rms_key, "rms"), (ln_key, "layer"))
        if (v := _eps_field(meta, key, path)) is not None
    ]
    if not found:
        settings["eps"] = missing(f"no {rms_key} or {ln_key}; llama.cpp has no default eps")
        settings["norm"] = missing("no eps key tells the norm type")
    elif len(found) == 1:
        key, norm, value = found[0]
        settings["eps"] = Resolved(
            value, Provenance("file", p, key), stored="float32", short=short_float32(value)
        )
        settings["norm"] = Resolved(norm, Provenance("derived", p, note=f"key {key}"))
    else:
        listed = ", ".join(f"{k}={v!r}" for k, _, v in found)
        notes.append(f"both an RMSNorm and a LayerNorm eps are stored: {listed}")
        settings["eps"] = Resolved(None, Provenance("conflict", p, note=listed))
        settings["norm"] = Resolved(None, Provenance("conflict", p, note=listed))
    impl = Provenance("framework", _LLAMA_CPP)
    settings["placement"] = Resolved("inside", impl)
    if arch in GEMMA_ARCHS:
        baked = Provenance(
            "framework",
            "llama.cpp convert_hf_to_gguf adds the Gemma +1 into the stored norm weights",
        )
        settings["gain"] = Resolved("1+w", Provenance("derived", p, note=f"architecture {arch!r}"))
        settings["gain_baked"] = Resolved(True, baked)
        notes.append(
            "Gemma gain: the +1 is already in the stored weights; a runtime that "
            "adds 1 again produces garbage"
        )
    else:
        settings["gain"] = Resolved("w", impl)
        settings["gain_baked"] = Resolved(False, impl)
    settings["reduction_dtype"] = Resolved(
        "float64", Provenance("framework", "llama.cpp ggml CPU backend sums squares in double")
    )
    emb_key = f"{arch}.embedding_length"
    emb = meta.fields.get(emb_key)
    if emb is not None:
        if emb.type not in _INT_TYPES or emb.value < 1:
            raise InputFileError(
                path,
                f"expected a positive integer, got a GGUF {emb.type} {emb.value!r}",
                key=emb_key,
            )
        settings["dim"] = Resolved(int(emb.value), Provenance("file", p, emb_key))
    entries = [ConfigEntry("*", ())]
    entries += _per_head_entries(meta, p, arch)
    model = name if isinstance(name, str) else arch
    return NormConfig(
        path=p,
        kind="gguf",
        model=model,
        defaults=NormSettings().overlay(settings),
        entries=tuple(entries),
        notes=tuple(notes),
    )


def _per_head_entries(meta: GgufMetadata, p: str, arch: str) -> list[ConfigEntry]:
    """q_norm/k_norm entries when the file has attn_q_norm / attn_k_norm tensors (metadata only).

    The dim is the stored weight's length; the patterns use the Hugging Face module names the
    llama.cpp converter maps from (``*.self_attn.q_norm``).
    """
    entries = []
    for hf, gg in (("q_norm", "attn_q_norm"), ("k_norm", "attn_k_norm")):
        shape = meta.tensor_shapes.get(f"blk.0.{gg}.weight")
        if shape is None:
            continue
        if not shape or shape[0] < 1:
            raise InputFileError(
                p, f"tensor blk.0.{gg}.weight has shape {list(shape)}", key=f"blk.0.{gg}.weight"
            )
        dim = Resolved(
            int(shape[0]),
            Provenance("file", p, f"tensor blk.0.{gg}.weight shape"),
        )
        entries.append(ConfigEntry(f"*.self_attn.{hf}", (("dim", dim),)))
    return entries
