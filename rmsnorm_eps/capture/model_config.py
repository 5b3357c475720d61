"""What a capture checks in a model's ``config.json`` before transformers builds the model: the
sizes it divides by or allocates with must be positive integers (``intermediate_size`` may be a
per-layer list of them, as Gemma 3n's is; transformers would otherwise
fail deep inside the model's constructor, e.g. with ``ZeroDivisionError`` for
``num_attention_heads: 0``), and every norm eps (:data:`EPS_KEYS`) a finite number > 0 (a JSON
string ``"1e-5"`` fails inside the forward pass as ``TypeError``; NaN makes every q/eps NaN, so
that no token is ever recorded; ``null`` is ``eps=None``, which transformers' norms add to
the variance).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rmsnorm_eps.capture.checkpoint import WeightsPresent, weights_present
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.errors import InputFileError

__all__ = [
    "EPS_KEYS",
    "EXPERT_KEYS",
    "LAYER_KEYS",
    "MAX_LAYERS",
    "MAX_WIDTH",
    "PER_LAYER_KEYS",
    "SIZE_KEYS",
    "WIDTH_FLOOR",
    "check_config_document",
    "check_model_config",
    "check_sizes",
    "model_build_error",
]

#: Keys of a transformers config (at its top level or in a nested ``text_config``,
#: ``vision_config``, ``encoder``/``decoder``...) that must be integers >= 1 when present.
SIZE_KEYS = frozenset(
    {
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "n_head",
        "n_embd",
        "n_layer",
        "d_model",
        "num_heads",
        "num_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_layers",
        "decoder_layers",
        "num_decoder_layers",
    }
)
#: Keys of a transformers config (at any depth up to 4) that hold a norm's eps.
EPS_KEYS = frozenset(
    {
        "rms_norm_eps",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "layernorm_epsilon",
        "layernorm_eps",
        "norm_epsilon",
        "norm_eps",
        "rms_norm_epsilon",
        "ln_eps",
        "eps",
    }
)
#: Size keys that may also be a per-layer list, each entry an integer >= 1 (Gemma 3n's
#: ``intermediate_size``: one MLP width per layer).
PER_LAYER_KEYS = frozenset({"intermediate_size"})
#: Size keys that count layers; the others are widths or counts of heads.
LAYER_KEYS = frozenset(
    {
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "encoder_layers",
        "decoder_layers",
        "num_decoder_layers",
    }
)
#: Keys that count a mixture of experts' experts (0 or null: no experts, not checked). Each
#: expert holds weights of its own, or its weights are one tensor with an axis per expert.
EXPERT_KEYS = frozenset({"num_experts", "num_local_experts", "n_routed_experts"})
#: Most layers a layer key may ask for, whatever the weights (no real model has 200).
MAX_LAYERS = 1024
#: Widest width (or most heads) a size key may ask for, whatever the weights.
MAX_WIDTH = 1 << 20
#: A width up to this is never refused for want of a tensor that wide (a small test model's
#: ``intermediate_size`` may exceed every tensor dimension when no layer uses it).
WIDTH_FLOOR = 1 << 14
#: Largest config.json read (a real one is a few KB).
_MAX_BYTES = 1 << 20
_MAX_DEPTH = 4


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:60]!r}")
        out[key] = value
    return out


def check_model_config(directory: Path) -> WeightsPresent | None:
    """Refuse, with one line naming the file and key, a ``config.json`` in ``directory`` whose
    sizes (:data:`SIZE_KEYS`, at any depth up to 4) are not integers >= 1 (a per-layer list:
    each one), whose eps values (:data:`EPS_KEYS`) are not finite numbers > 0, or that repeats
    a key; and one whose sizes are out of proportion with the weights present
    (:func:`check_sizes`). Returns the weights present (:func:`weights_present`; None without
    a safetensors checkpoint). A directory without config.json (a GGUF model) is left to the
    loader."""
    path = directory / "config.json"
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_BYTES + 1)
        if len(data) > _MAX_BYTES:
            raise InputFileError(path, f"over {_MAX_BYTES >> 20} MiB: not a model config")
        # NaN/Infinity are read as numbers (transformers reads them so), then refused by key
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_unique)
    except InputFileError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputFileError(path, f"not a JSON model config ({exc})") from None
    present = weights_present(directory)
    check_config_document(path, doc, present)
    return present


def check_config_document(path: Path, doc: Any, present: WeightsPresent | None) -> None:
    """The checks of :func:`check_model_config` on a config already parsed (``doc``; for a GGUF
    model, the config transformers derives from its metadata, with ``present`` from its tensor
    table), reported against ``path``."""
    sizes: list[tuple[str, str, int]] = []
    _check(path, doc, "", 0, sizes)
    check_sizes(path, sizes, present)


def check_sizes(
    path: Path, sizes: list[tuple[str, str, int]], present: WeightsPresent | None
) -> None:
    """Refuse, before anything is built, a size that would build a model out of proportion
    with its checkpoint's weights (``present``; None: no safetensors header to read, so only
    the fixed caps): a layer count (:data:`LAYER_KEYS`) above the number of tensors present
    (every layer holds weights of its own; layers that share one set still number far fewer
    than the tensors) or :data:`MAX_LAYERS`; any other size above the largest tensor
    dimension present (at least :data:`WIDTH_FLOOR`) or :data:`MAX_WIDTH`; an expert count
    (:data:`EXPERT_KEYS`) above both the tensors and the largest dimension present. ``sizes``
    holds ``(shown key, key, value)``."""
    for name, key, value in sizes:
        if key in EXPERT_KEYS:
            if present is not None and value > max(present.tensors, present.largest_dim):
                raise InputFileError(
                    path,
                    f"{value} experts, but the checkpoint holds {present.tensors} tensor(s) "
                    f"of at most {present.largest_dim} along any axis: so many experts cannot "
                    "come from these weights",
                    key=name,
                )
            if value > MAX_WIDTH:
                raise InputFileError(
                    path, f"{value} experts, over the {MAX_WIDTH} a capture builds", key=name
                )
            continue
        if key in LAYER_KEYS:
            if present is not None and value > present.tensors:
                raise InputFileError(
                    path,
                    f"{value} layers, but the checkpoint holds {present.tensors} tensor(s): "
                    "a model this deep cannot come from these weights",
                    key=name,
                )
            if value > MAX_LAYERS:
                raise InputFileError(
                    path, f"{value} layers, over the {MAX_LAYERS} a capture builds", key=name
                )
            continue
        widest = MAX_WIDTH if present is None else max(present.largest_dim, WIDTH_FLOOR)
        if value > min(widest, MAX_WIDTH):
            held = (
                ""
                if present is None
                else (f"; the widest tensor of the checkpoint has {present.largest_dim}")
            )
            raise InputFileError(
                path, f"{value} is too large a size for these weights{held}", key=name
            )


def _check(path: Path, obj: Any, where: str, depth: int, sizes: list[tuple[str, str, int]]) -> None:
    if not isinstance(obj, dict) or depth > _MAX_DEPTH:
        return
    for key, value in obj.items():
        name = f"{where}{key}"
        if key in SIZE_KEYS and value is not None:
            per_layer = key in PER_LAYER_KEYS and isinstance(value, list)
            for i, item in enumerate(value if per_layer else [value]):
                if not _is_size(item):
                    raise InputFileError(
                        path,
                        f"{str(item)[:40]!r} is not a size: expected an integer >= 1",
                        key=f"{name}[{i}]" if per_layer else name,
                    )
            if per_layer and not value:
                raise InputFileError(path, "an empty per-layer list is not a size", key=name)
            sizes.extend((name, key, int(v)) for v in (value if per_layer else [value]))
        elif key in EPS_KEYS:
            _check_eps(path, value, name)
        elif key in EXPERT_KEYS and _is_size(value):
            sizes.append((name, key, value))
        elif isinstance(value, dict):
            _check(path, value, f"{name}.", depth + 1, sizes)


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_eps(path: Path, value: Any, key: str) -> None:
    """An eps must be a JSON number, finite and > 0."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        shown = "null" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"
        raise InputFileError(path, f"the eps is {shown}: expected a number > 0", key=key)
    if not math.isfinite(value) or value <= 0:
        raise InputFileError(path, f"the eps is {value!r}: expected a finite number > 0", key=key)


def model_build_error(directory: Path, exc: BaseException) -> CaptureError:
    """The one line for an error raised while transformers builds a model from its config
    (any such error is the config's: a bad size, an inconsistent combination)."""
    text = " ".join(str(exc).split())[:200] or type(exc).__name__
    return CaptureError(
        f"{directory}: the model cannot be built from its config.json "
        f"({type(exc).__name__}: {text})"
    )
