"""What kind of file is this: the one place that reads magic bytes.

:func:`sniff` looks at the first bytes of a file (and, for a zip archive, at the name of its
first local entry) and returns a :class:`Kind`. Every reader decides its format through it, so a
new format is recognised in one place. The rules, in order:

* empty file: ``EMPTY``;
* ``\\x93NUMPY``: ``NPY``;
* ``PK\\x03\\x04`` or ``PK\\x05\\x06`` (an empty archive): ``TORCH_ZIP`` when the first entry is
  named ``<dir>/data.pkl`` (what ``torch.save`` writes first), else ``ZIP`` (an ``.npz``);
* ``GGUF``: ``GGUF``;
* 8 bytes that are not printable text (a little-endian length ``n``) followed by ``{``, or
  with ``0 < n <= min(size - 8, SAFETENSORS_HEADER_MAX)``: ``SAFETENSORS``;
* text (no NUL byte in the first bytes): ``JSON`` when it starts with ``{`` (after
  whitespace) or is named ``*.json``; ``CSV``/``TSV`` by extension; ``YAML`` by extension, a
  leading ``---`` or ``%YAML``;
* anything else: ``UNKNOWN``.

The extension is a hint only for text formats; binary formats are decided by content alone.
"""

from __future__ import annotations

import enum
import os
import stat
from pathlib import Path

from rmsnorm_eps.errors import InputFileError

__all__ = [
    "GGUF_MAGIC",
    "NPY_MAGIC",
    "SAFETENSORS_HEADER_MAX",
    "ZIP_LOCAL_MAGIC",
    "ZIP_MAGIC",
    "Kind",
    "check_regular_file",
    "read_head",
    "sniff",
]

NPY_MAGIC = b"\x93NUMPY"
ZIP_LOCAL_MAGIC = b"PK\x03\x04"
#: A zip archive starts with a local file header, or (empty archive) the end-of-directory record.
ZIP_MAGIC = (ZIP_LOCAL_MAGIC, b"PK\x05\x06")
GGUF_MAGIC = b"GGUF"
#: Largest safetensors JSON header recognised (and read) by the readers.
SAFETENSORS_HEADER_MAX = 16 << 20

_HEAD = 512  # bytes read to decide; enough for a zip local header with a long first name
_ZIP_LOCAL = 30  # fixed part of a zip local file header


class Kind(enum.Enum):
    """The format of a file, as :func:`sniff` decides it from its first bytes."""

    EMPTY = "empty"
    NPY = "npy"
    ZIP = "zip"  # an .npz (or any zip that is not a torch.save file)
    TORCH_ZIP = "torch-zip"
    SAFETENSORS = "safetensors"
    GGUF = "gguf"
    JSON = "json"
    YAML = "yaml"
    CSV = "csv"
    TSV = "tsv"
    UNKNOWN = "unknown"


def check_regular_file(path: Path) -> int:
    """Return the size of ``path`` after checking that it is a readable regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(path, "no such file") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot stat: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(path, "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(path, "is not a regular file (FIFO, device or socket)")
    if not os.access(path, os.R_OK):
        raise InputFileError(path, "permission denied")
    return st.st_size


def read_head(path: Path, n: int = _HEAD) -> bytes:
    """The first ``n`` bytes of ``path`` (fewer for a short file); errors name the file."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def _zip_kind(head: bytes) -> Kind:
    if head.startswith(ZIP_LOCAL_MAGIC) and len(head) >= _ZIP_LOCAL:
        name_len = int.from_bytes(head[26:28], "little")
        name = head[_ZIP_LOCAL : _ZIP_LOCAL + name_len]
        parts = name.split(b"/")
        if len(parts) == 2 and parts[0] and parts[1] == b"data.pkl":
            return Kind.TORCH_ZIP
    return Kind.ZIP


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    if all(32 <= b < 127 or b in b"\t\r\n" for b in head[:8]):  # text, e.g. '{"rms": {'
        return False
    n = int.from_bytes(head[:8], "little")
    return head[8:9] == b"{" or 0 < n <= min(size - 8, SAFETENSORS_HEADER_MAX)


def _text_kind(head: bytes, suffix: str) -> Kind:
    if b"\x00" in head:
        return Kind.UNKNOWN
    stripped = head.lstrip()
    if suffix == ".json" or stripped.startswith(b"{"):
        return Kind.JSON
    if suffix in (".csv", ".tsv"):
        return Kind.CSV if suffix == ".csv" else Kind.TSV
    if suffix in (".yaml", ".yml") or stripped.startswith((b"---", b"%YAML")):
        return Kind.YAML
    return Kind.UNKNOWN


def sniff(path: str | os.PathLike[str]) -> Kind:
    """The :class:`Kind` of the file at ``path`` (see the module docstring for the rules).

    Raises :class:`~rmsnorm_eps.errors.InputFileError` when ``path`` is not a readable regular
    file.
    """
    p = Path(path)
    size = check_regular_file(p)
    head = read_head(p)
    if not head:
        return Kind.EMPTY
    if head.startswith(NPY_MAGIC):
        return Kind.NPY
    if head[:4] in ZIP_MAGIC:
        return _zip_kind(head)
    if head.startswith(GGUF_MAGIC):
        return Kind.GGUF
    if _is_safetensors(head, size):
        return Kind.SAFETENSORS
    return _text_kind(head, p.suffix.lower())
