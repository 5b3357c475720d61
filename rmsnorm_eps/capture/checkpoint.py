"""Whether a model's weights all came from its checkpoint.

transformers builds the model from ``config.json`` and then fills it from the weight files;
a parameter the files do not hold is left at its random initial value ("newly initialized"),
and a tensor of the files the model has no place for is dropped. Either way the norms would
see activations of some other model than the one on disk: :func:`check_weights` refuses both
(naming the first few tensors and the count) unless random weights are allowed, when it
returns the names left random so that the caller can say so.

What is not counted, because it cannot change what any norm sees:

* an encoder checkpoint saved with a task head (``BertForMaskedLM``'s ``cls.*``) loaded as
  its base model (``AutoModel``): the head's tensors lie outside the model's module tree;
* that base model's ``pooler.*``, which a head checkpoint may lack: it runs on the last hidden
  state, after every norm.

The sources of the figures are transformers' ``from_pretrained(..., output_loading_info=True)``
(``missing_keys``, ``unexpected_keys``, ``mismatched_keys``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.errors import brief

__all__ = ["SHOWN", "check_weights", "random_weights_line", "unmatched_weights"]

#: How many tensor names a message lists before "and N more".
SHOWN = 4
_AFTER_THE_NORMS = ("pooler.",)


def _key(entry: Any) -> str:
    """A tensor name from a loading-info entry (a name, or a tuple that starts with one)."""
    return str(entry[0] if isinstance(entry, tuple | list) and entry else entry)


def unmatched_weights(info: dict[str, Any], model: Any, family: str) -> dict[str, list[str]]:
    """``{"missing": [...], "unexpected": [...], "mismatched": [...]}``, each sorted, from
    transformers' loading info, without what cannot change a norm's input (see the module
    docstring)."""
    children = {name for name, _ in model.named_children()}
    children |= {name.split(".")[0] for name, _ in model.named_parameters()}
    missing = sorted({_key(k) for k in info.get("missing_keys") or ()})
    unexpected = sorted({_key(k) for k in info.get("unexpected_keys") or ()})
    mismatched = sorted({_key(k) for k in info.get("mismatched_keys") or ()})
    if family == "encoder":
        missing = [k for k in missing if not k.startswith(_AFTER_THE_NORMS)]
        unexpected = [k for k in unexpected if k.split(".")[0] in children]
    return {"missing": missing, "unexpected": unexpected, "mismatched": mismatched}


def _listed(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(brief(n) for n in names[:SHOWN])
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{shown}{more}"


def check_weights(
    where: Path, info: dict[str, Any], model: Any, family: str, *, allow_random: bool
) -> tuple[str, ...]:
    """The names of the model's weights left at their random initial values (empty when the
    checkpoint filled every one). Raises :class:`CaptureError` naming the missing, unexpected
    and mismatched tensors (first :data:`SHOWN` of each, and the counts) unless
    ``allow_random`` (then unexpected tensors are dropped, as transformers drops them)."""
    found = unmatched_weights(info, model, family)
    if not any(found.values()):
        return ()
    parts = [f"{len(v)} {what} ({_listed(v)})" for what, v in found.items() if v]
    if allow_random:
        return tuple(found["missing"] + found["mismatched"])
    raise CaptureError(
        f"{where}: the checkpoint does not match the model its config.json builds: "
        f"{'; '.join(parts)} weight(s); those would be random, not the model's "
        "(give --allow-random-weights to run anyway)"
    )


def random_weights_line(names: tuple[str, ...]) -> str:
    """The warning for a run on weights left random (``--allow-random-weights``)."""
    return (
        f"warning: {len(names)} weight(s) of the model are not in the checkpoint and were "
        f"initialized at random ({_listed(names)}): the norms see a model with random "
        "weights there"
    )
