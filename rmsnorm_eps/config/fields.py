"""Validation of one setting's raw value (from YAML or JSON) into a typed value.

YAML 1.1 (PyYAML) reads ``1e-6`` (no dot) as the string "1e-6": numeric fields accept numeric
strings on purpose, and reject anything else with the key path in the message. Booleans are
never numbers here (YAML ``yes`` is True, and True == 1 in Python).
"""

from __future__ import annotations

import math
from typing import Any

from rmsnorm_eps.config.model import GAINS, NORMS, PLACEMENTS, REDUCTION_DTYPES, Value
from rmsnorm_eps.errors import InputFileError, brief

__all__ = ["parse_dim", "parse_eps", "parse_setting", "shorten"]

#: Longest piece of input text (a key, a glob) quoted in an error message.
MAX_QUOTED = 200


def shorten(text: str, limit: int = MAX_QUOTED) -> str:
    """``text`` cut in the middle with an ellipsis past ``limit`` characters (error lines stay
    short whatever the input holds)."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}...({len(text) - 2 * keep} characters)...{text[-keep:]}"


def _number(raw: Any, path: str, key: str) -> float:
    if isinstance(raw, bool) or raw is None:
        raise InputFileError(path, f"expected a number, got {brief(raw)}", key=key)
    if isinstance(raw, int | float):
        try:
            return float(raw)
        except OverflowError:  # an integer beyond the float range (YAML 1 followed by 400 0s)
            return math.inf
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            pass
    raise InputFileError(path, f"expected a number, got {brief(raw)}", key=key)


def parse_eps(raw: Any, path: str, key: str) -> float:
    """eps: a finite number > 0 (numeric strings such as YAML's "1e-6" accepted)."""
    value = _number(raw, path, key)
    if not math.isfinite(value) or value <= 0.0:
        raise InputFileError(path, f"eps must be a finite number > 0, got {brief(raw)}", key=key)
    return value


def parse_dim(raw: Any, path: str, key: str) -> int:
    """dim: a positive integer (an integral numeric string is accepted)."""
    value = _number(raw, path, key)
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise InputFileError(path, f"dim must be a positive integer, got {brief(raw)}", key=key)
    return int(value)


def _choice(raw: Any, choices: tuple[str, ...], path: str, key: str) -> str:
    text = str(raw) if isinstance(raw, str | int) and not isinstance(raw, bool) else None
    if text is None or text not in choices:
        raise InputFileError(
            path, f"expected one of {', '.join(choices)}, got {brief(raw)}", key=key
        )
    return text


_CHOICES = {
    "placement": PLACEMENTS,
    "gain": GAINS,
    "norm": NORMS,
    "reduction_dtype": REDUCTION_DTYPES,
}


def parse_setting(name: str, raw: Any, path: str, key: str) -> Value:
    """Validate the raw value of setting ``name`` (one of model.FIELDS)."""
    if name == "eps":
        return parse_eps(raw, path, key)
    if name == "dim":
        return parse_dim(raw, path, key)
    if name in _CHOICES:
        return _choice(raw, _CHOICES[name], path, key)
    if name in ("gain_baked", "weight_after_cast"):
        if not isinstance(raw, bool):
            raise InputFileError(path, f"expected true or false, got {brief(raw)}", key=key)
        return raw
    raise InputFileError(path, f"unknown setting {name!r}", key=key)
