"""The per-layer driver of ``ratio`` and ``compare``: :func:`open_layers` (the names), the
command's per-layer settings resolved once from the names, then :func:`read_layers` (with how
a dump is read: :class:`DumpReading`) and a few entry points to the readers, which live in
:mod:`rmsnorm_eps.sources` (format-neutral: :func:`~rmsnorm_eps.sources.open_sources`,
:class:`~rmsnorm_eps.sources.interface.ArraySource`, one module per format).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

import numpy as np

from rmsnorm_eps.engine import Quantity, layer_quantities
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.sources.intent import InputWarning, shape_warnings
from rmsnorm_eps.sources.interface import MAX_LAYERS, Opened, Unreadable, open_sources
from rmsnorm_eps.sources.raw import DEFAULT_CHUNK_BYTES, RawArraySource

if TYPE_CHECKING:
    from rmsnorm_eps.config.model import NormConfig

__all__ = [
    "MEMORY_LABEL",
    "DumpReading",
    "LayersRead",
    "ReadingFields",
    "layer_settings",
    "npy_bytes",
    "open_layers",
    "read_layers",
    "renamed",
    "reuse_shared",
    "source_key",
    "source_label",
]

T = TypeVar("T")
#: What a command takes from a layer's name (hashable: :func:`reuse_shared` keys on it).
S = TypeVar("S", bound=Hashable)

#: The source a report of arrays in memory names (:func:`rmsnorm_eps.check`).
MEMORY_LABEL = "<memory>"


@dataclass(frozen=True)
class DumpReading:
    """How ``ratio`` and ``compare`` read a dump, passed whole (the CLI fills it once).

    ``raw``: the arrays hold activations ``x`` of shape ``(..., d)``, ``q = mean(x**2)`` over
    the last axis computed here; ``top_k``: worst inputs kept per layer; ``chunk_bytes`` read
    per chunk; ``threads`` reading and computing chunks (None: the default); ``dtype``
    ``"bfloat16"`` reads uint16/V2 arrays as bfloat16 bits; ``column`` of a CSV/TSV dump;
    ``skip_unreadable``: a layer that cannot be read is listed, not fatal; ``config`` (a
    :func:`~rmsnorm_eps.config.load_config` result) matched against the layer names; ``norm``
    the kind of a layer its config entry does not name (``layer``: figures of the variance v);
    ``fast`` (``ratio --raw``): float32 sums, every deciding q recomputed exactly;
    ``max_layers``: a dump with more layers is refused (companions do not count);
    ``allow_unmatched``: a YAML config's pattern that matches no layer of the dump is accepted
    (else an error: a typo would silently leave every layer on the defaults).
    """

    raw: bool = False
    top_k: int = 5
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    threads: int | None = None
    dtype: str | None = None
    column: str | None = None
    skip_unreadable: bool = False
    config: NormConfig | None = None
    norm: str = "rms"
    fast: bool = True
    max_layers: int = MAX_LAYERS
    allow_unmatched: bool = False

    def check(self) -> None:
        """Refuse a negative ``top_k``, a non-positive ``chunk_bytes`` or ``threads``."""
        if self.top_k < 0:
            raise InvalidParameterError(f"top must be >= 0, got {self.top_k}")
        if self.chunk_bytes <= 0:
            raise InvalidParameterError("chunk_bytes must be > 0")
        if self.threads is not None and self.threads < 1:
            raise InvalidParameterError(f"threads must be >= 1, got {self.threads}")


class ReadingFields(TypedDict, total=False):
    """:class:`DumpReading`'s fields as keyword arguments (``analyze_dump(path, eps,
    raw=True)``), for callers that give a few of them."""

    raw: bool
    top_k: int
    chunk_bytes: int
    threads: int | None
    dtype: str | None
    column: str | None
    skip_unreadable: bool
    config: NormConfig | None
    norm: str
    fast: bool
    max_layers: int
    allow_unmatched: bool


@dataclass(frozen=True)
class LayersRead(Generic[T]):
    """Every readable layer of a dump, analysed, and the account of its members."""

    layers: tuple[T, ...]
    skipped: tuple[Unreadable, ...]
    members_total: int
    members_analysed: int
    #: Layers whose shape does not fit the reading (:func:`~.sources.intent.shape_warnings`).
    warnings: tuple[InputWarning, ...] = ()


def open_layers(path: str | os.PathLike[str] | Opened, reading: DumpReading) -> Opened:
    """The dump opened as ``reading`` says (``path`` may also be sources already opened:
    arrays in memory, :func:`rmsnorm_eps.check`). Nothing is read yet: the layer names are
    known, so each command resolves its per-layer settings from them before
    :func:`read_layers` reads a byte."""
    reading.check()
    if isinstance(path, Opened):
        return path
    return open_sources(
        path,
        reading.dtype,
        lenient=reading.skip_unreadable,
        column=reading.column,
        max_layers=reading.max_layers,
    )


def layer_settings(opened: Opened, reading: DumpReading) -> dict[str, Quantity]:
    """The quantity of each layer of ``opened`` (q, or v for a LayerNorm: its config entry's
    ``norm``, else ``reading.norm``), the part of the per-layer settings both commands share."""
    return layer_quantities([src.name for src in opened.sources], reading.norm, reading.config)


def read_layers(
    opened: Opened,
    reading: DumpReading,
    settings: Mapping[str, S],
    analyse: Callable[[Any, S], T],
) -> LayersRead[T]:
    """The per-layer driver of ``ratio`` and ``compare``: analyse each layer of ``opened``
    (:func:`open_layers`) in order with its settings, ``settings[name]``, resolved from the
    names before (eps, quantity, ...: data, hashable). A layer stored under several names
    with the same settings is analysed once (:func:`reuse_shared`). A layer whose data cannot
    be read (any :class:`InputFileError`) raises, or with ``skip_unreadable`` is listed in
    ``skipped`` with its problem: nothing is ever left out silently. ``members_analysed``
    counts each analysed layer with its companions. ``warnings``: the layers whose shape
    suggests the reading answers a different question
    (:func:`~rmsnorm_eps.sources.intent.shape_warnings`), returned, never printed."""
    sources, skipped = opened.sources, list(opened.unreadable)
    run = reuse_shared(analyse)
    layers: list[T] = []
    failed: set[str] = set()
    for src in sources:
        try:
            layers.append(run(src, settings[src.name]))
        except InputFileError as exc:
            if not reading.skip_unreadable:
                raise
            skipped.append(Unreadable(src.name, exc.problem))
            failed.add(src.name)
    return LayersRead(
        tuple(layers),
        tuple(skipped),
        opened.members_total,
        sum(src.members for src in sources if src.name not in failed),
        shape_warnings(sources, reading.raw),
    )


def source_key(src: Any) -> tuple[Hashable, ...] | None:
    """What decides the numbers of a layer read from a file: the file, the offset of its first
    stored byte, dtype, shape, order and the stored-as tag (and its companions' keys). Two
    sources with the same key read the same bytes the same way (a tensor saved under several
    names, views of one storage). None where the bytes are not read in place (compressed
    members, CSV columns, arrays in memory): such sources are never taken to be the same."""
    if not isinstance(src, RawArraySource) or src.data_offset is None:
        return None
    companions: list[tuple[str, Hashable]] = []
    for label, comp in src.companions:
        key = source_key(comp)
        if key is None:
            return None
        companions.append((label, key))
    return (
        str(src.path),
        src.data_offset,
        src.dtype.str,
        src.shape,
        src.order,
        src.stored_as,
        src.member_crc,
        tuple(companions),
    )


def renamed(result: T, name: str) -> T:
    """A layer's result (:class:`~rmsnorm_eps.analysis.LayerResult`,
    :class:`~rmsnorm_eps.compare.analysis.CompareLayer`) under another layer name, its
    first-token/other-tokens parts named after it as the analysis names them."""
    parts: dict[str, Any] = {"name": name}
    for part, label in (("first_token", "first token"), ("other_tokens", "other tokens")):
        sub = getattr(result, part, None)
        if sub is not None:
            parts[part] = replace(sub, name=f"{name} ({label})")
    return replace(result, **parts)  # type: ignore[type-var]


def reuse_shared(analyse: Callable[[Any, S], T]) -> Callable[[Any, S], T]:
    """``analyse`` that runs once per distinct stored data: a layer whose :func:`source_key`
    and settings equal an earlier layer's gets that layer's result :func:`renamed`. One
    tensor saved under N names is read and analysed once, not N times: the time follows the
    file, not the names."""
    done: dict[tuple[Hashable, ...], T] = {}

    def run(src: Any, settings: S) -> T:
        key = source_key(src)
        if key is None:
            return analyse(src, settings)
        full = (key, settings)
        hit = done.get(full)
        if hit is not None:
            return renamed(hit, src.name)
        result = done[full] = analyse(src, settings)
        return result

    return run


def source_label(path: str | os.PathLike[str] | Opened) -> str:
    """What a report names as its source: the file, or ``<memory>`` for arrays in memory."""
    return MEMORY_LABEL if isinstance(path, Opened) else str(Path(path))


def npy_bytes(array: np.ndarray) -> bytes:
    """Serialize an array as .npy bytes (no pickling); used by writers and tests."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()
