"""The format-neutral view of a dump: :class:`ArraySource`, and :func:`open_sources`.

A dump is opened into one :class:`ArraySource` per array (a layer), whatever the file format;
members that cannot be read become :class:`Unreadable` entries (listed, never dropped). Which
reader opens a file is decided by :func:`~rmsnorm_eps.sources.sniff.sniff` and the
:data:`OPENERS` registry (kind -> ``"module:function"``, imported on first use).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast

from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.sources.intent import check_dtype_applies
from rmsnorm_eps.sources.sniff import Kind, check_regular_file, read_head, sniff

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ACCEPTED",
    "CONVERT",
    "MAX_LAYERS",
    "OPENERS",
    "ArraySource",
    "Opened",
    "Opener",
    "SerialSource",
    "Unreadable",
    "open_sources",
]

T = TypeVar("T")


class ArraySource(Protocol):
    """One array of a dump (a layer): what the analysis reads, whatever the file format.

    Errors (damaged data, truncation) are raised as :class:`~rmsnorm_eps.errors.InputFileError`
    naming ``path`` and ``key``.
    """

    @property
    def path(self) -> Path: ...

    @property
    def key(self) -> str | None:
        """The array's name inside its container; ``None`` for a one-array file."""

    @property
    def name(self) -> str:
        """Layer name: ``key``, or the file's stem."""

    @property
    def dtype(self) -> np.dtype[Any]:
        """Stored dtype (either byte order; uint16/V2 for bfloat16 bit patterns)."""

    @property
    def dtype_name(self) -> str:
        """Logical dtype in native order: ``float32``, ``bfloat16``, ..."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def order(self) -> str:
        """``'C'`` or ``'F'``: the order of the elements in :meth:`iter_elements`."""

    @property
    def size(self) -> int:
        """Number of elements."""

    @property
    def stored_as(self) -> str | None:
        """``"bfloat16"`` when stored uint16/V2 values are bfloat16 bit patterns."""

    @property
    def members(self) -> int:
        """Container members this source stands for (itself and its companions)."""

    def companion(self, name: str) -> ArraySource | None:
        """The companion array ``name`` (e.g. ``"position"``) of this layer, if any."""

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, values)``: consecutive 1-D runs of at most ``elems_per_chunk`` elements in
        ``order``, native byte order, valid until the next iteration."""

    def iter_mapped(
        self, elems_per_chunk: int, fn: Callable[[int, np.ndarray], T], threads: int = 1
    ) -> Iterator[tuple[int, T]]:
        """``(start, fn(start, values))`` for the chunks of :meth:`iter_elements`, in order,
        possibly computed on ``threads`` worker threads."""


class SerialSource:
    """What the sources read on one thread (CSV columns, arrays in memory) share: elements in
    C order, no bfloat16 storage, and :meth:`iter_mapped` computed in the caller's thread
    (parsing text holds the GIL; data in memory needs no reader threads)."""

    @property
    def order(self) -> str:
        return "C"

    @property
    def stored_as(self) -> str | None:
        return None

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        raise NotImplementedError

    def iter_mapped(
        self, elems_per_chunk: int, fn: Callable[[int, np.ndarray], T], threads: int = 1
    ) -> Iterator[tuple[int, T]]:
        """``(start, fn(start, values))`` for the chunks of :meth:`iter_elements`, in order."""
        del threads
        for start, values in self.iter_elements(elems_per_chunk):
            yield start, fn(start, values)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A layer (container member) that could not be read, and why: listed, never dropped."""

    name: str
    problem: str


class Opened(NamedTuple):
    """What an opener returns: the readable arrays, the unreadable members (only when opened
    ``lenient``; else the first one raises) and how many members the container has in all."""

    sources: list[Any]  # list[ArraySource]; Any so concrete source lists are accepted
    unreadable: list[Unreadable]
    members_total: int


#: ``opener(path, size, stored_as, lenient)``: read the file's headers, check every array's
#: dtype and declared size, and return :class:`Opened`. With ``lenient`` a member that cannot
#: be opened is returned as :class:`Unreadable`; without, it raises.
Opener = Callable[[Path, int, "str | None", bool], Opened]

#: An :data:`Opener` that also takes the ``column`` selection (the kinds in
#: :data:`COLUMN_KINDS`): ``opener(path, size, stored_as, lenient, column)``.
ColumnOpener = Callable[[Path, int, "str | None", bool, "str | None"], Opened]

#: The readers, by the kind :func:`sniff` returns: ``"module:function"`` of an :data:`Opener`,
#: imported on first use (so unused readers cost no start-up time).
OPENERS: dict[Kind, str] = {
    Kind.NPY: "rmsnorm_eps.sources.npy:open_npy",
    Kind.ZIP: "rmsnorm_eps.sources.npz:open_npz",
    Kind.TORCH_ZIP: "rmsnorm_eps.sources.torchsave:open_torchsave",
    Kind.SAFETENSORS: "rmsnorm_eps.sources.safetensors:open_safetensors",
    Kind.CSV: "rmsnorm_eps.sources.csv:open_csv",
    Kind.TSV: "rmsnorm_eps.sources.csv:open_tsv",
}

#: Kinds whose opener takes the ``column=`` selection (``--column``).
COLUMN_KINDS = frozenset({Kind.CSV, Kind.TSV})

#: The formats :func:`open_sources` reads, for messages about anything else.
ACCEPTED = "not a .npy or .npz, .safetensors, torch.save (.pt/.pth) or .csv/.tsv dump"
#: How to get there from an array in Python.
CONVERT = "to convert an array: numpy.save('q.npy', array)"

_NOT_A_DUMP = {
    Kind.GGUF: "a GGUF model file",
    Kind.JSON: "a JSON file",
    Kind.YAML: "a YAML file",
}

#: Layers a dump may hold unless the caller raises it (``--max-layers``): real models have a
#: few hundred norm modules (Llama-3-405B: 253). A member ``<layer>::<what>`` (a companion
#: such as ``::position``) is not a layer and is not counted.
MAX_LAYERS = 4096

#: Separator between a layer's name and its companion's (as :data:`npz.COMPANION_SEP`).
_COMPANION_SEP = "::"

#: Logical dtypes that can be asked for (``dtype=``), stored as raw bit patterns. ``bfloat16``:
#: arrays of dtype uint16 or int16 (either byte order; int16 is what ``tensor.view(torch.int16)``
#: gives) or ``V2`` (what ``np.save`` writes for an ml_dtypes bfloat16 array; read as
#: little-endian) hold bfloat16 bit patterns.
_STORED_AS = ("bfloat16",)


def _opener(kind: Kind) -> Opener | None:
    target = OPENERS.get(kind)
    if target is None:
        return None
    module, _, func = target.partition(":")
    opener: Opener = getattr(importlib.import_module(module), func)
    return opener


def _not_a_dump(path: Path, kind: Kind) -> InputFileError:
    """One line: what the file looks like, the accepted formats and a conversion recipe."""
    what = _NOT_A_DUMP.get(kind, "unrecognised magic bytes")
    hint = ""
    if kind is Kind.UNKNOWN and read_head(path, 2) == b"\x80\x02":  # pickle protocol 2
        hint = " (a legacy non-zip torch.save file? load it and torch.save it again)"
    return InputFileError(path, f"{what}{hint}: {ACCEPTED}; {CONVERT}")


def layer_count(opened: Opened) -> int:
    """Layers of an opened dump: its sources and its unreadable members, companions
    (``<layer>::<what>``) not counted."""
    return len(opened.sources) + sum(_COMPANION_SEP not in u.name for u in opened.unreadable)


def check_layer_count(path: Path, opened: Opened, max_layers: int) -> Opened:
    """``opened``, or :class:`InputFileError` when it holds more than ``max_layers`` layers
    (see :func:`layer_count`)."""
    count = layer_count(opened)
    if count > max_layers:
        raise InputFileError(
            path,
            f"{count} layers, more than --max-layers {max_layers} (raise it with --max-layers N)",
        )
    return opened


def open_sources(
    path: str | os.PathLike[str],
    dtype: str | None = None,
    lenient: bool = False,
    column: str | None = None,
    max_layers: int = MAX_LAYERS,
) -> Opened:
    """Open a dump, whatever its format, into one :class:`ArraySource` per array.

    The format is decided by the file's first bytes (:func:`sniff`), not its extension.
    Headers, dtypes and declared sizes are all checked here, before any analysis starts.
    ``dtype="bfloat16"`` reads uint16/int16/V2 arrays as bfloat16 bit patterns. With ``lenient`` a
    member that cannot be opened is listed in ``Opened.unreadable`` instead of failing the
    whole dump; a file that is not a readable dump at all still raises. ``column`` (CSV/TSV
    only) selects one column by header name or 0-based index (``--column``). A dump of more
    than ``max_layers`` layers (:data:`MAX_LAYERS`; companions not counted) raises
    :class:`InputFileError` once its headers are read, before any array data is, and so does a
    ``dtype`` that no layer is read as (:func:`~rmsnorm_eps.sources.intent.check_dtype_applies`).
    """
    if max_layers < 1:
        raise InvalidParameterError(f"max_layers must be >= 1, got {max_layers}")
    if dtype is not None and dtype not in _STORED_AS:
        raise InvalidParameterError(f"dtype must be one of {', '.join(_STORED_AS)}, got {dtype!r}")
    p = Path(path)
    size = check_regular_file(p)
    kind = sniff(p)
    if kind is Kind.EMPTY:
        raise InputFileError(p, "empty file")
    opener = _opener(kind)
    if opener is None:
        raise _not_a_dump(p, kind)
    if column is not None:
        if kind not in COLUMN_KINDS:
            raise InputFileError(p, "--column applies to .csv/.tsv dumps only")
        opened = cast("ColumnOpener", opener)(p, size, dtype, lenient, column)
    else:
        opened = opener(p, size, dtype, lenient)
    check_dtype_applies(p, opened.sources, dtype)
    return check_layer_count(p, opened, max_layers)
