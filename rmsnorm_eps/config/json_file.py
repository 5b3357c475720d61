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

__all__ = [
    "MAX_JSON_BYTES",
    "NULL_EPS",
    "NonFinite",
    "load_json",
    "read_capped_text",
    "refuse_non_finite",
]


@dataclass(frozen=True)
class NonFinite:
    """A ``NaN``/``Infinity``/``-Infinity`` literal. Not JSON, but transformers writes them
    (``"time_step_limit": [0.0, Infinity]`` in Mamba2, Bamba and Falcon-H1 configs), so they
    are kept as this marker and refused only when a key the reader uses holds one."""

    text: str

    def __repr__(self) -> str:
        return self.text


def refuse_non_finite(raw: Any, path: Path, key: str) -> None:
    if isinstance(raw, NonFinite):
        raise InputFileError(path, f"invalid JSON: {raw.text} is not valid JSON", key=key)


#: The error for an eps key that holds JSON ``null``: refused, never read as a missing key
#: (a missing key may get a runtime's documented default; a null one says nothing).
NULL_EPS = "null is not an eps: give a number, or remove the key"


#: Largest config.json read. Real ones are a few KiB (a classifier's id2label a few hundred
#: KiB); a JSON object costs Python about 40 times its text size, so 4 MiB stays far under
#: the 256 MiB peak-memory promise whatever the file holds.
MAX_JSON_BYTES = 4 << 20


class _DuplicateKey(ValueError):
    """The key (``args[0]``) repeated in a JSON object."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: a JSON object whose keys repeat is refused (json would keep the last
    one silently, and two readers may pick different ones)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_capped_text(path: Path, cap: int, kind: str) -> str:
    """The UTF-8 text of a ``kind`` (JSON, YAML) config of at most ``cap`` bytes (a whole
    number of MiB), refused before decoding when larger."""
    from rmsnorm_eps.sources.sniff import read_head

    raw = read_head(path, cap + 1)
    if len(raw) > cap:
        raise InputFileError(path, f"{kind} config larger than {cap >> 20} MiB: refused (size cap)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(path, "not UTF-8 text") from None


def load_json(path: Path) -> Any:
    """Parse JSON (duplicate keys refused, at most :data:`MAX_JSON_BYTES`) into Python
    objects; NaN/Infinity literals become :class:`NonFinite` markers (refused where used)."""
    text = read_capped_text(path, MAX_JSON_BYTES, "JSON")
    try:
        return json.loads(text, parse_constant=NonFinite, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise InputFileError(path, "invalid JSON: nested too deeply") from None
    except _DuplicateKey as exc:
        raise InputFileError(
            path, "duplicate key in a JSON object", key=shorten(exc.args[0])
        ) from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise InputFileError(path, f"invalid JSON: {shorten(str(exc))}") from None
