"""config.json as Python objects, refusing what JSON readers disagree on.

Duplicate keys are refused (``json`` keeps the last one silently); NaN/Infinity literals, which
transformers writes, become :class:`NonFinite` markers refused where a value is used; the file
is capped at :data:`MAX_JSON_BYTES`. Used by :mod:`rmsnorm_eps.config.hf`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.errors import InputFileError

__all__ = ["MAX_JSON_BYTES", "NonFinite", "load_json", "refuse_non_finite"]


@dataclass(frozen=True)
class NonFinite:
    """A ``NaN``/``Infinity``/``-Infinity`` literal. Not JSON, but transformers writes them
    (``"time_step_limit": [0.0, Infinity]`` in Mamba2, Bamba and Falcon-H1 configs), so they
    are kept as this marker and refused only when a key the reader uses holds one."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _non_finite(name: str) -> NonFinite:
    return NonFinite(name)


def refuse_non_finite(raw: Any, path: Path, key: str) -> None:
    if isinstance(raw, NonFinite):
        raise InputFileError(path, f"invalid JSON: {raw.text} is not valid JSON", key=key)


#: Largest config.json read. Real ones are a few KiB (a classifier's id2label a few hundred
#: KiB); a JSON object costs Python about 40 times its text size, so 4 MiB stays far under
#: the 256 MiB peak-memory promise whatever the file holds.
MAX_JSON_BYTES = 4 << 20


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: a JSON object whose keys repeat is refused (json would keep the last
    one silently, and two readers may pick different ones)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def load_json(path: Path) -> Any:
    """Parse JSON (duplicate keys refused, at most :data:`MAX_JSON_BYTES`) into Python
    objects; NaN/Infinity literals become :class:`NonFinite` markers (refused where used)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise InputFileError(
            path, f"JSON config larger than {MAX_JSON_BYTES >> 20} MiB: refused (size cap)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(path, "not UTF-8 text") from None
    del raw
    try:
        return json.loads(text, parse_constant=_non_finite, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise InputFileError(path, "invalid JSON: nested too deeply") from None
    except _DuplicateKey as exc:
        raise InputFileError(path, "duplicate key in a JSON object", key=shorten(exc.key)) from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise InputFileError(path, f"invalid JSON: {shorten(str(exc))}") from None
