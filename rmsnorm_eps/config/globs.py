"""Layer-name globs: the one matcher behind ``config show``, ``config diff``, ``ratio --config``
and ``compare --config``.

Syntax (exactly Python's ``fnmatch.fnmatchcase``, case-sensitive, whole name):

- ``*`` any run of characters, empty included, dots and slashes too (``*.q_norm`` covers
  every layer's q_norm);
- ``?`` exactly one character;
- ``[seq]`` one character in seq (ranges ``a-z``; ``]`` first in seq is literal);
  ``[!seq]`` one character not in seq; an unclosed ``[`` is a literal ``[``;
- every other character, backslash included, stands for itself (there is no escape).

:class:`GlobIndex` finds every pattern of a config that matches a name without testing each
pattern: literal patterns (no ``*``, ``?`` or ``[``) are one dict lookup; every other pattern
is tokenized once and filed under one literal run it must contain (as the name's prefix,
suffix or inside it; the run the fewest patterns share), so that a name is tested only
against the patterns whose run it contains. A candidate is tested by the classic wildcard
walk (back to the last ``*`` on a mismatch: time at most name length x pattern length, no
exponential backtracking); each distinct ``[...]`` is compiled once with
``fnmatch.translate``, so sets mean exactly what fnmatch says. Time per name is linear in
the name's length times the number of distinct run lengths, plus the candidates tested;
patterns with no literal character at all (``*``, ``?*``, ``[0-9]*``) are tested for every
name.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["GlobIndex", "compile_glob", "is_literal", "match_tokens", "witness"]

_SPECIAL = frozenset("*?[")
#: Characters tried, in order, for ``?`` and ``[...]`` in a witness name.
_WITNESS_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.-/:"


def is_literal(pattern: str) -> bool:
    """True when the pattern has no wildcard (it matches only itself)."""
    return not (_SPECIAL & set(pattern))


_STAR = object()
_ANY = object()
_Token = str | re.Pattern[str] | object


def compile_glob(pattern: str) -> tuple[_Token, ...]:
    """Split a glob the way fnmatch.translate does, into per-character tokens: a literal
    character, ``_ANY`` (``?``), a set regex (``[...]``) or ``_STAR`` (a run of ``*``)."""
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not out or out[-1] is not _STAR:
                out.append(_STAR)
        elif c == "?":
            out.append(_ANY)
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append("[")
            else:
                out.append(_set_regex(pattern[i - 1 : j + 1]))
                i = j + 1
        else:
            out.append(c)
    return tuple(out)


def witness(pattern: str) -> str | None:
    """The shortest name the pattern matches, with ``?``/``[...]`` spelled by the first of
    ``0-9a-zA-Z_.-/:`` they accept (``model.layers.[0-9].x`` -> ``model.layers.0.x``).

    None when no such name exists (a set that accepts none of those characters, e.g. ``[z-a]``).
    """
    parts: list[str] = []
    for tok in compile_glob(pattern):
        if isinstance(tok, str):
            parts.append(tok)
        elif tok is _ANY:
            parts.append(_WITNESS_CHARS[0])
        elif isinstance(tok, re.Pattern):
            hit = next((c for c in _WITNESS_CHARS if tok.match(c)), None)
            if hit is None:
                return None
            parts.append(hit)
    return "".join(parts)


@functools.lru_cache(maxsize=4096)
def _set_regex(text: str) -> re.Pattern[str]:
    """One ``[...]`` as fnmatch reads it, for testing one character."""
    return re.compile(fnmatch.translate(text))


def match_tokens(tokens: tuple[_Token, ...], name: str) -> bool:
    """Whole-name match of compiled tokens (the same answer as fnmatch.fnmatchcase).

    On a mismatch the walk resumes after the last ``*`` with that star taking one more
    character: a later ``*`` can absorb anything an earlier one could, so no other choice
    needs to be retried.
    """
    i = j = 0
    n, m = len(name), len(tokens)
    star, mark = -1, 0
    while i < n:
        tok = tokens[j] if j < m else None
        if tok is _STAR:
            star, mark = j, i
            j += 1
            continue
        if tok is not None and (
            tok is _ANY
            or (tok == name[i] if isinstance(tok, str) else tok.match(name[i]) is not None)  # type: ignore[attr-defined]
        ):
            i += 1
            j += 1
        elif star >= 0:
            mark += 1
            i, j = mark, star + 1
        else:
            return False
    while j < m and tokens[j] is _STAR:
        j += 1
    return j == m


def _keys(tokens: tuple[_Token, ...]) -> list[tuple[str, str]]:
    """Every (kind, run) a name matching the tokens must contain: its literal prefix
    ('prefix'), literal suffix ('suffix') and each literal run between wildcards ('inside')."""
    keys = []
    start = 0
    for literal, group in itertools.groupby(tokens, key=lambda tok: isinstance(tok, str)):
        run = list(group)
        end = start + len(run)
        if literal:
            kind = "prefix" if start == 0 else "suffix" if end == len(tokens) else "inside"
            keys.append((kind, "".join(map(str, run))))
        start = end
    return keys


@dataclass
class GlobIndex:
    """Every pattern of a sequence, indexed for fast "which patterns match this name".

    ``matches(name)`` returns the positions (ascending) of the patterns that match, exactly as
    ``[i for i, p in enumerate(patterns) if fnmatch.fnmatchcase(name, p)]`` would.
    """

    patterns: tuple[str, ...]
    _literal: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _compiled: dict[int, tuple[_Token, ...]] = field(default_factory=dict, repr=False)
    _by_kind: dict[str, dict[str, list[int]]] = field(default_factory=dict, repr=False)
    _lengths: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _free: list[int] = field(default_factory=list, repr=False)

    @classmethod
    def build(cls, patterns: Iterable[str]) -> GlobIndex:
        index = cls(tuple(patterns))
        by_kind: dict[str, dict[str, list[int]]] = {"prefix": {}, "suffix": {}, "inside": {}}
        compiled_of: dict[str, tuple[_Token, ...]] = {}
        keyed: list[tuple[int, list[tuple[str, str]]]] = []
        counts: dict[tuple[str, str], int] = {}
        for i, pattern in enumerate(index.patterns):
            if is_literal(pattern):
                index._literal.setdefault(pattern, []).append(i)
                continue
            tokens = compiled_of.get(pattern)
            if tokens is None:
                tokens = compiled_of[pattern] = compile_glob(pattern)
            index._compiled[i] = tokens
            keys = _keys(tokens)
            if not keys:
                index._free.append(i)
                continue
            keyed.append((i, keys))
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
        # File each pattern under its most selective run: the one the fewest patterns share
        # (a common prefix such as "model.layers." would make every pattern a candidate),
        # then the longest, anchored runs first (fewer lookups per name).
        rank = {"prefix": 0, "suffix": 0, "inside": 1}
        for i, keys in keyed:
            kind, run = min(keys, key=lambda k: (counts[k], rank[k[0]], -len(k[1])))
            by_kind[kind].setdefault(run, []).append(i)
        index._by_kind = by_kind
        index._lengths = {k: tuple(sorted({len(r) for r in d})) for k, d in by_kind.items()}
        return index

    def _candidates(self, name: str) -> set[int]:
        found: set[int] = set(self._free)
        n = len(name)
        prefix, suffix, inside = (self._by_kind[k] for k in ("prefix", "suffix", "inside"))
        for ln in self._lengths["prefix"]:
            if ln > n:
                break
            found.update(prefix.get(name[:ln], ()))
        for ln in self._lengths["suffix"]:
            if ln > n:
                break
            found.update(suffix.get(name[n - ln :], ()))
        for ln in self._lengths["inside"]:
            if ln > n:
                break
            for s in range(n - ln + 1):
                hit = inside.get(name[s : s + ln])
                if hit:
                    found.update(hit)
        return found

    def matches(self, name: str) -> tuple[int, ...]:
        """Positions of the patterns that match ``name`` (fnmatchcase), ascending."""
        hits = [i for i in self._candidates(name) if match_tokens(self._compiled[i], name)]
        hits.extend(self._literal.get(name, ()))
        return tuple(sorted(hits))
