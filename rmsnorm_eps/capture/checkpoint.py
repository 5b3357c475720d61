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
  state, after every norm;
* a sub-model the loaded class has no module for, in any model: a vision-language checkpoint
  loaded as its text model holds ``vision_tower.*``, ``vision_model.*`` or
  ``multi_modal_projector.*`` tensors whose first name part is no module or parameter of the
  model, so nothing the model runs reads them. Outside an encoder (whose task heads are
  expected) they are named in a note (:func:`outside_weights_note`). A tensor under one of
  the model's own modules (``model.layers.0.extra.weight``) is still refused: the model runs
  that module, so a tensor it has no place for there means another architecture.

The sources of the figures are transformers' ``from_pretrained(..., output_loading_info=True)``
(``missing_keys``, ``unexpected_keys``, ``mismatched_keys``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.errors import InputFileError, brief

__all__ = [
    "MAX_SHARDS",
    "PARAMETER_FLOOR",
    "SHOWN",
    "WeightsPresent",
    "check_parameter_count",
    "check_weights",
    "gguf_weights_present",
    "outside_weights",
    "outside_weights_note",
    "random_weights_line",
    "shard_names",
    "unmatched_weights",
    "weights_present",
]

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
    missing = sorted({_key(k) for k in info.get("missing_keys") or ()})
    outside = set(outside_weights(info, model))
    unexpected = sorted({_key(k) for k in info.get("unexpected_keys") or ()} - outside)
    mismatched = sorted({_key(k) for k in info.get("mismatched_keys") or ()})
    if family == "encoder":
        missing = [k for k in missing if not k.startswith(_AFTER_THE_NORMS)]
    return {"missing": missing, "unexpected": unexpected, "mismatched": mismatched}


def outside_weights(info: dict[str, Any], model: Any) -> list[str]:
    """The unexpected tensors of transformers' loading info whose first name part is no
    child module, parameter or buffer of ``model``: a sub-model the loaded class does not
    contain (see the module docstring), sorted."""
    top = {name for name, _ in model.named_children()}
    top |= {name.split(".")[0] for name, _ in model.named_parameters()}
    top |= {name.split(".")[0] for name, _ in model.named_buffers()}
    unexpected = {_key(k) for k in info.get("unexpected_keys") or ()}
    return sorted(k for k in unexpected if k.split(".")[0] not in top)


def outside_weights_note(info: dict[str, Any], model: Any, family: str) -> str | None:
    """The note naming the sub-models of the checkpoint the loaded class has no module for
    (:func:`outside_weights`: their first name part and tensor count, the first
    :data:`SHOWN` parts), None when there are none or ``family`` is "encoder" (a task head
    is expected there)."""
    names = outside_weights(info, model) if family != "encoder" else []
    if not names:
        return None
    counts: dict[str, int] = {}
    for name in names:
        counts[name.split(".")[0]] = counts.get(name.split(".")[0], 0) + 1
    parts = [f"{brief(part)} ({n})" for part, n in sorted(counts.items())]
    more = f" and {len(parts) - SHOWN} more" if len(parts) > SHOWN else ""
    return (
        f"note: {len(names)} tensor(s) of the checkpoint belong to sub-models "
        f"{type(model).__name__} has no module for and were not loaded: "
        f"{', '.join(parts[:SHOWN])}{more}; nothing the model runs reads them"
    )


def _listed(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(brief(n) for n in names[:SHOWN])
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{shown}{more}"


#: The end of the refusal when the caller offers ``--allow-random-weights`` (capture), and
#: when it does not (sensitivity: its KL, perplexity and verdict would be another model's).
_OVERRIDE = "give --allow-random-weights to run anyway"
_NO_OVERRIDE = (
    "only capture takes --allow-random-weights: a sensitivity verdict on random weights "
    "would be about another model"
)


def check_weights(
    where: Path, info: dict[str, Any], model: Any, family: str, *, allow_random: bool | None
) -> tuple[str, ...]:
    """The names of the model's weights left at their random initial values (empty when the
    checkpoint filled every one). Raises :class:`CaptureError` naming the missing, unexpected
    and mismatched tensors (first :data:`SHOWN` of each, and the counts) unless
    ``allow_random`` (then unexpected tensors are dropped, as transformers drops them); the
    message names ``--allow-random-weights`` when ``allow_random`` is False (the caller offers
    it) and says that only capture has it when None."""
    found = unmatched_weights(info, model, family)
    if not any(found.values()):
        return ()
    labels = {"missing": "missing", "unexpected": "unexpected", "mismatched": "of another shape"}
    parts = [f"{len(v)} {labels[what]} ({_listed(v)})" for what, v in found.items() if v]
    if allow_random:
        return tuple(found["missing"] + found["mismatched"])
    raise CaptureError(
        f"{where}: the checkpoint does not match the model its config.json builds: "
        f"{'; '.join(parts)} weight(s); those would be random, not the model's "
        f"({_OVERRIDE if allow_random is False else _NO_OVERRIDE})"
    )


def random_weights_line(names: tuple[str, ...]) -> str:
    """The warning for a run on weights left random (``--allow-random-weights``)."""
    return (
        f"warning: {len(names)} weight(s) of the model are not in the checkpoint (or of "
        f"another shape there) and were newly initialized at random ({_listed(names)}): the "
        "norms see a model with random weights there"
    )


@dataclass(frozen=True)
class WeightsPresent:
    """What a model directory's ``.safetensors`` headers hold: the number of tensors, their
    largest dimension, and the files read; ``elements``, the sum over the tensors of the
    product of their shape. Read before anything is built: only the headers."""

    tensors: int
    largest_dim: int
    files: tuple[str, ...]
    elements: int = 0


#: Most weight files (shards) read for :func:`weights_present`.
MAX_SHARDS = 4096


def shard_names(directory: Path, single: str = "model.safetensors") -> list[str]:
    """The weight files of the checkpoint named ``single`` (``model.safetensors``, or
    ``pytorch_model.bin``): those its index (``single`` + ``.index.json``) maps the weights to
    (plain names inside ``directory``, of the same extension), else ``single`` itself."""
    suffix = Path(single).suffix
    index = directory / f"{single}.index.json"
    if index.is_file():
        try:
            with open(index, "rb") as fh:
                doc = json.loads(fh.read(64 << 20).decode("utf-8"))
            files = sorted({str(v) for v in dict(doc["weight_map"]).values()})
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise InputFileError(index, f"not a {suffix[1:]} index ({exc})") from None
        bad = [f for f in files if Path(f).name != f or not f.endswith(suffix)]
        if bad:
            raise InputFileError(index, f"weight_map names {brief(bad[0])}, not a file beside it")
        if len(files) > MAX_SHARDS:
            raise InputFileError(index, f"{len(files)} weight files, over {MAX_SHARDS}")
        return files
    return [single] if (directory / single).is_file() else []


def weights_present(directory: Path) -> WeightsPresent | None:
    """The tensors of ``directory``'s safetensors checkpoint, from the file headers alone;
    None when there is none (``.bin`` weights, GGUF): nothing to cap sizes against."""
    from rmsnorm_eps.sources.safetensors import read_safetensors_header

    files = shard_names(directory)
    if not files:
        return None
    tensors = largest = elements = 0
    for name in files:
        path = directory / name
        if not path.is_file():
            raise InputFileError(path, "no such weight file (the safetensors index names it)")
        for entry in read_safetensors_header(path).values():
            tensors += 1
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if isinstance(shape, list):
                dims = [d for d in shape if isinstance(d, int) and not isinstance(d, bool)]
                largest = max([largest, *dims])
                elements += math.prod(dims)
    return WeightsPresent(tensors, largest, tuple(files), elements)


def gguf_weights_present(reader: Any, path: Path) -> WeightsPresent:
    """What a GGUF file's tensor table holds (``reader``: a ``gguf.GGUFReader``): tensors,
    their largest dimension and their elements (a quantized tensor counts its logical
    elements)."""
    largest = elements = 0
    for tensor in reader.tensors:
        dims = [int(d) for d in tensor.shape]
        largest = max([largest, *dims])
        elements += int(tensor.n_elements)
    return WeightsPresent(len(reader.tensors), largest, (path.name,), elements)


#: Whatever the checkpoint, a model of up to this many parameters is built (2^28: 1 GiB in
#: float32); above it, at most twice the elements the checkpoint holds.
PARAMETER_FLOOR = 1 << 28


def check_parameter_count(
    where: Path, cls: Any, config: Any, present: WeightsPresent | None
) -> None:
    """Refuse, before the weights are allocated, a model whose parameters (counted on a model
    built on torch's ``meta`` device: no memory) number more than twice the elements of the
    checkpoint's tensors (``present``) and more than :data:`PARAMETER_FLOOR`: most of it
    would be random, and the allocation alone could exhaust the memory. Not checked without
    a safetensors checkpoint, for a quantized one (its tensors are packed), or when the model
    cannot be built on the meta device."""
    if present is None or getattr(config, "quantization_config", None) is not None:
        return
    import torch

    try:
        with torch.device("meta"):
            meta = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    except Exception:  # a constructor that needs real tensors: the load itself will tell
        return
    count = sum(p.numel() for p in meta.parameters())
    if count > max(2 * present.elements, PARAMETER_FLOOR):
        raise CaptureError(
            f"{where}: config.json builds a model of {count} parameters, but the checkpoint "
            f"holds {present.elements} values: most of the model would be random (and its "
            "memory allocated for nothing)"
        )
