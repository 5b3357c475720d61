"""A compact, immutable sequence of per-layer results (a report of 100,000 layers stays small).

A :class:`LayerStore` keeps each item (a frozen dataclass such as
:class:`rmsnorm_eps.analysis.LayerResult`) as the :mod:`marshal` bytes of a tuple of primitives
(``float``, ``int``, ``str``, ``None``, nested tuples), all in one buffer with an array of end
offsets, and decodes a fresh item on each access. A :class:`Codec` says how an item becomes
that tuple and back; the round trip is exact (marshal writes floats as their 8 IEEE bytes:
``-0.0``, NaN and inf survive bit for bit; strings with lone surrogates are written with
``surrogatepass``). marshal is only applied to values made in this process, never to file data.

Per item the store costs the marshal bytes (typically 200-300 B for a small layer) plus 8 B of
offset, instead of the ~1.7 KB of the dataclass objects. It behaves as a ``Sequence``: ``len``,
indexing (negative too), slicing (a new store), iteration, and ``==`` with any store, tuple or
list of the same items (item by item, the items' own ``==``).

The totals a report asks for repeatedly (:class:`StoreTotals`: sums of ``count``,
``violations``, ``nonfinite`` and the codec's extra sums and maxima, and the positions of the
layers with a violation) are folded once as the items are appended, so asking for them never
decodes the layers again.
"""

from __future__ import annotations

import marshal
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

__all__ = ["Codec", "LayerStore", "LayerStoreBuilder", "StoreTotals", "ints"]

T = TypeVar("T")

#: marshal's format version used (in process only; version 4 shares repeated objects by ref).
_VERSION = 4


def ints(values: Iterable[Any]) -> tuple[int, ...]:
    """``values`` as a tuple of plain ints (a codec's helper: numpy ints become int)."""
    return tuple(map(int, values))


class Codec(Protocol[T]):
    """How an item becomes a tuple of primitives and back (``decode(encode(x)) == x``,
    exactly), and which of its figures the store totals.

    ``sums``: names of int attributes summed over the items (``count``, ``violations`` and
    ``nonfinite`` always are); ``maxima``: names of ``float | None`` attributes whose maximum
    over the items (None when every item has None) is kept.
    """

    sums: tuple[str, ...]
    maxima: tuple[str, ...]

    def encode(self, item: T) -> tuple[Any, ...]: ...

    def decode(self, data: tuple[Any, ...]) -> T: ...


_BASE_SUMS = ("count", "violations", "nonfinite")


@dataclass
class StoreTotals:
    """Totals folded as items are appended: ``sums`` (attribute -> sum over the items),
    ``maxima`` (attribute -> max over the items' non-None values, or None) and ``affected``
    (positions of the items with ``violations > 0``, ascending)."""

    sums: dict[str, int] = field(default_factory=dict)
    maxima: dict[str, float | None] = field(default_factory=dict)
    affected: array[int] = field(default_factory=lambda: array("q"))

    def add(self, item: Any, position: int, codec: Codec[Any]) -> None:
        """Fold one item (at ``position`` in the store)."""
        for name in (*_BASE_SUMS, *codec.sums):
            self.sums[name] = self.sums.get(name, 0) + int(getattr(item, name))
        for name in codec.maxima:  # as max() over the non-None values: the first largest
            value = getattr(item, name)
            best = self.maxima.get(name)
            if value is not None and (best is None or value > best):
                self.maxima[name] = value
        if item.violations:
            self.affected.append(position)


class LayerStore(Sequence[T], Generic[T]):
    """An immutable sequence of items kept as marshal bytes (see the module docstring).

    Build one with :meth:`of` (from any iterable of items) or a :class:`LayerStoreBuilder`
    (appending items as they are computed).
    """

    __slots__ = ("_buf", "_codec", "_ends", "_totals")

    def __init__(
        self, codec: Codec[T], buf: bytes | bytearray, ends: array[int], totals: StoreTotals
    ) -> None:
        """Internal: use :meth:`of` or :class:`LayerStoreBuilder` (which own ``buf``)."""
        self._codec = codec
        self._buf = buf
        self._ends = ends
        self._totals = totals

    @classmethod
    def of(cls, items: Iterable[T], codec: Codec[T]) -> LayerStore[T]:
        """A store of ``items`` (another store with the same codec is returned as is)."""
        if isinstance(items, LayerStore) and items._codec is codec:
            return items
        builder = LayerStoreBuilder(codec)
        for item in items:
            builder.append(item)
        return builder.build()

    @property
    def codec(self) -> Codec[T]:
        return self._codec

    @property
    def totals(self) -> StoreTotals:
        """The folded totals (do not modify)."""
        return self._totals

    def total(self, name: str) -> int:
        """Sum of the int attribute ``name`` over the items (a name of ``count``,
        ``violations``, ``nonfinite`` or the codec's ``sums``)."""
        return self._totals.sums.get(name, 0)

    def maximum(self, name: str) -> float | None:
        """Maximum of the attribute ``name`` (one of the codec's ``maxima``) over the items
        whose value is not None; None when there is none."""
        return self._totals.maxima.get(name)

    @property
    def affected(self) -> Sequence[int]:
        """Positions of the items with a violation, ascending."""
        return self._totals.affected

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded items and their offsets."""
        return len(self._buf) + self._ends.itemsize * len(self._ends)

    def __len__(self) -> int:
        return len(self._ends)

    def _decode(self, i: int) -> T:
        start = self._ends[i - 1] if i else 0
        with memoryview(self._buf) as view:
            data = marshal.loads(view[start : self._ends[i]])
        return self._codec.decode(data)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> LayerStore[T]: ...

    def __getitem__(self, index: int | slice) -> T | LayerStore[T]:
        if isinstance(index, slice):
            picked = range(*index.indices(len(self)))
            return LayerStore.of((self._decode(i) for i in picked), self._codec)
        n = len(self._ends)
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("layer index out of range")
        return self._decode(i)

    def __iter__(self) -> Iterator[T]:
        buf, ends, decode = self._buf, self._ends, self._codec.decode
        start = 0
        with memoryview(buf) as view:
            for end in ends:
                data = marshal.loads(view[start:end])
                start = end
                yield decode(data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (LayerStore, tuple, list)):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple of the same items (equal to it)

    def __repr__(self) -> str:
        return f"LayerStore({tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (LayerStore, (self._codec, bytes(self._buf), self._ends, self._totals))


class LayerStoreBuilder(Generic[T]):
    """Appends items to a store as they are computed; :meth:`build` returns the store (the
    builder must not be used after)."""

    def __init__(self, codec: Codec[T]) -> None:
        self._codec = codec
        self._buf = bytearray()
        self._ends: array[int] = array("q")
        self._totals = StoreTotals()

    def __len__(self) -> int:
        return len(self._ends)

    def append(self, item: T) -> None:
        """Encode ``item`` and fold it into the totals."""
        self._totals.add(item, len(self._ends), self._codec)
        self._buf += marshal.dumps(self._codec.encode(item), _VERSION)
        self._ends.append(len(self._buf))

    def build(self) -> LayerStore[T]:
        """The immutable store of every appended item."""
        buf, self._buf = self._buf, bytearray()
        return LayerStore(self._codec, buf, self._ends, self._totals)
