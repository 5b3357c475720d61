"""The spellings of a dtype that every ``--dtype`` option and every SPEC ``dtype=`` accept.

A leaf module (no numpy), so the command line and the libraries share one vocabulary.
"""

from __future__ import annotations

__all__ = ["DTYPE_ALIASES", "canonical_dtype"]

#: Every spelling ``--dtype`` accepts, mapped to numpy's name. ``--dtype`` always names the
#: dtype of the data (how the values are stored or computed), whatever the command.
DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
}


def canonical_dtype(text: str, choices: tuple[str, ...]) -> str:
    """numpy's name for ``text`` (any spelling of :data:`DTYPE_ALIASES`, any case), if it is
    one of ``choices``; ValueError naming the accepted names otherwise."""
    name = DTYPE_ALIASES.get(text.strip().lower())
    if name is None or name not in choices:
        raise ValueError(f"{text!r} is not one of {', '.join(choices)} (or bf16, fp16, fp32...)")
    return name
