"""A sequence made on demand: how a report of 100,000 layers is written in bounded memory.

A document's ``layers`` list, or a check report's ``checks``, is a :class:`Lazy` when it is
built for rendering: its items are produced one at a time from the result each time it is
iterated, and never held together. The writers (:func:`rmsnorm_eps.reports.render_chunks`)
stream them; :func:`materialize` turns a document holding :class:`Lazy` values into plain lists
and dicts (what :func:`rmsnorm_eps.reports.document.document` returns to library callers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

__all__ = ["Lazy", "materialize"]

T = TypeVar("T")


class Lazy(Sequence[T]):
    """``length`` items, made anew by ``items()`` on every iteration (so memory never holds
    them all). Indexing iterates up to the item (linear: for tests and small reports); equality
    with any sequence compares the items in order."""

    __slots__ = ("_items", "_length")

    def __init__(self, length: int, items: Callable[[], Iterable[T]]) -> None:
        self._length = length
        self._items = items

    @classmethod
    def over(cls, source: Sequence[Any], item: Callable[[Any], T]) -> Lazy[T]:
        """``item(x)`` for each ``x`` of ``source`` (one item per element, in order)."""
        return cls(len(source), lambda: (item(x) for x in source))

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[T]:
        n = 0
        for value in self._items():
            n += 1
            yield value
        if n != self._length:
            raise RuntimeError(f"a lazy sequence of {self._length} items produced {n}")

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return list(self)[index]
        i = index + self._length if index < 0 else index
        if not 0 <= i < self._length:
            raise IndexError(index)
        for k, value in enumerate(self):
            if k == i:
                return value
        raise IndexError(index)  # pragma: no cover (length checked in __iter__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Lazy({self._length} items)"


def materialize(value: Any) -> Any:
    """``value`` with every :class:`Lazy` (at any depth, in dicts, lists and tuples) made a
    list: the plain document a library caller or ``json.dumps`` expects."""
    if isinstance(value, Lazy):
        return [materialize(v) for v in value]
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialize(v) for v in value]
    return value
