"""Readings that would answer a different question than the one the user asked.

Two kinds, both decided from the headers alone (shapes and dtypes, before any data is read):

* :func:`check_dtype_applies`: ``dtype="bfloat16"`` (``--dtype bfloat16``) reinterprets arrays
  stored as 2-byte integers (uint16, int16, ``V2``) as bfloat16 bit patterns; it converts
  nothing. When no layer of the dump is read as bfloat16 (every layer holds float16, float32 or
  float64 values, or text: a CSV), the option changed nothing and the user believes it did
  (e.g. that it rounds q to bfloat16): an :class:`~rmsnorm_eps.errors.InputFileError`. A dump
  that mixes bit-pattern members with float members is read as documented (each member as what
  it is), and a natively bfloat16 member (safetensors ``BF16``, a torch bfloat16 tensor) agrees
  with the option.
* :func:`shape_warnings`: shapes that usually mean the arrays are not what the reading assumes,
  returned as :class:`InputWarning` (the CLI prints them; ``--strict`` makes them errors):

  - without ``raw``, a q array of two or more axes whose last axis is a positive multiple of
    :data:`WIDTH_STEP` (64): the shape of activations ``(..., d)`` (model widths and head
    dimensions are multiples of 64), i.e. ``x**2`` saved per element instead of
    ``q = mean(x**2)`` per vector. ``rmsnorm-eps capture`` writes q as ``(N,)`` and never
    triggers it; a ``(batch, tokens)`` q array triggers it when ``tokens`` is a multiple of 64
    (the warning is a hint, the analysis still runs);
  - with ``raw``, a 1-D array: it is one vector of N elements, so the layer has one q.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.escape import line

__all__ = ["WIDTH_STEP", "InputWarning", "check_dtype_applies", "shape_warnings"]

#: Model widths (hidden sizes, head dimensions) are multiples of this: a q array whose last axis
#: is one is probably ``x**2`` per element (see the module docstring).
WIDTH_STEP = 64


@dataclass(frozen=True, slots=True)
class InputWarning:
    """A reading that probably answers a different question: where (``path``, ``key``: the
    member, ``None`` for a one-array file) and what (``problem``). Both come from the input:
    :attr:`message` shows them escaped (:func:`rmsnorm_eps.escape.line`)."""

    path: str
    key: str | None
    problem: str

    @property
    def message(self) -> str:
        """One line: ``<path> [<key>]: <problem>``, names escaped as in error messages."""
        where = line(self.path) if self.key is None else f"{line(self.path)} [{line(self.key)}]"
        return f"{where}: {self.problem}"


def check_dtype_applies(path: Path, sources: list[Any], dtype: str | None) -> None:
    """Raise :class:`InputFileError` when ``dtype`` is given and no layer of ``sources`` is read
    as it (see the module docstring): the option would silently change nothing. The message
    names the file, the first layer (for a container) and its dtype."""
    if dtype is None or not sources or any(src.stored_as == dtype for src in sources):
        return
    first = sources[0]
    others = " (nor to any other member of the dump)" if len(sources) > 1 else ""
    raise InputFileError(
        path,
        f"--dtype {dtype} does not apply to {first.dtype_name} data{others}: it reads uint16, "
        "int16 or V2 arrays as bfloat16 bit patterns and converts nothing; drop --dtype",
        key=first.key,
    )


def shape_warnings(sources: list[Any], raw: bool) -> tuple[InputWarning, ...]:
    """The :class:`InputWarning` of each layer whose shape does not fit the reading ``raw``
    (see the module docstring), in the order of ``sources``."""
    found: list[InputWarning] = []
    for src in sources:
        shape = tuple(src.shape)
        if raw and len(shape) == 1:
            problem = (
                f"--raw on a 1-D array treats it as one vector of {shape[0]} elements (one q); "
                "for a q per input, save activations of shape (tokens, d), or drop --raw for q"
            )
        elif not raw and len(shape) >= 2 and shape[-1] > 0 and shape[-1] % WIDTH_STEP == 0:
            problem = (
                f"shape {shape} looks like x**2 per element (last axis {shape[-1]}, a model "
                "width): did you forget the mean? use --raw for activations, or save "
                "q = mean(x**2, axis=-1)"
            )
        else:
            continue
        found.append(InputWarning(str(src.path), src.key, problem))
    return tuple(found)
