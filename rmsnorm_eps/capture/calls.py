"""What a model (or its encoder or decoder stack) was called with: B, T, the token ids and the
padding mask, however they were passed; and the inputs of a layout probe.

Arguments are bound to the names of the module's ``forward`` signature, so positional and
keyword arguments read alike. The token ids are ``input_ids`` (or, for the decoder of an
encoder-decoder model called at the root, ``decoder_input_ids``), else the first positional
argument when it is a 2-D tensor; ``inputs_embeds`` ``[B, T, D]`` gives B and T alone.

The padding mask (1: a real token) of a stack, first found of:

1. the root call's mask for that stack: ``attention_mask`` (the model, or its encoder) or
   ``decoder_attention_mask`` (its decoder), when its shape is the stack's [B, T];
2. the stack's own ``attention_mask`` argument (2-D, [B, T]; T5 passes the decoder's mask so);
3. a 2-D ``*padding_mask`` argument (fairseq's convention, FSMT's ``decoder_padding_mask``:
   True or 1 on padding), other than the encoder's in a decoder;

else every token is real.
"""

from __future__ import annotations

import inspect
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError

__all__ = ["Call", "bind", "padded_length", "probe_inputs", "read_call", "takes_argument"]

#: keyword arguments a layout probe drops (state the rerun must not touch)
_STATEFUL = ("past_key_values", "cache", "mems", "layer_state", "cache_position")

_SIGNATURES: dict[type, inspect.Signature | None] = {}


class Call:
    """B and T (None: unknown), the host bool mask [B, T] (None: none found) and the ids."""

    __slots__ = ("bt", "ids", "mask")

    def __init__(self, bt: tuple[int, int] | None, mask: Any, ids: Any) -> None:
        self.bt, self.mask, self.ids = bt, mask, ids


def _signature(module: Any) -> inspect.Signature | None:
    cls = type(module)
    if cls not in _SIGNATURES:
        try:
            _SIGNATURES[cls] = inspect.signature(module.forward)
        except (TypeError, ValueError):
            _SIGNATURES[cls] = None
    return _SIGNATURES[cls]


def takes_argument(module: Any, name: str) -> bool:
    """Whether the module's ``forward`` has a parameter called ``name``."""
    sig = _signature(module)
    return sig is not None and name in sig.parameters


def padded_length(value: Any, call_mask: Any) -> int | None:
    """L when ``value`` is a 2-D mask [B, L], L > T, of a layer inside the model whose real
    tokens are exactly the call's (``call_mask``, host bool [B, T]) followed by padding only;
    else None. A mask is read as 0/1 (bool or integer: non-zero is real) or, holding a
    negative value, as additive (0 is real, a large negative value masks)."""
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim != 2:
        return None
    b, t = (int(n) for n in call_mask.shape)
    if int(value.shape[0]) != b or int(value.shape[1]) <= t:
        return None
    m = value.detach().to("cpu")
    additive = m.is_floating_point() and bool((m < 0).any())
    real = m >= 0 if additive else m != 0
    if torch.equal(real[:, :t], call_mask) and not bool(real[:, t:].any()):
        return int(value.shape[1])
    return None


def bind(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name (``**kwargs`` merged in; unbound positionals
    as ``#0``, ``#1``, ...)."""
    sig = _signature(module)
    try:
        bound = sig.bind_partial(*args, **kwargs) if sig is not None else None
    except TypeError:
        bound = None
    named: dict[str, Any] = {}
    if sig is None or bound is None:
        named.update(kwargs)
        named.update({f"#{i}": v for i, v in enumerate(args)})
    else:
        for name, value in bound.arguments.items():
            kind = sig.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, dict):
                named.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                named.update({f"#{i}": v for i, v in enumerate(value)})
            else:
                named[name] = value
    if args:
        named.setdefault("#first", args[0])
    return named


def _mask_of(value: Any, shape: tuple[int, int] | None, inverted: bool = False) -> Any:
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim != 2:
        return None
    if shape is not None and tuple(int(n) for n in value.shape) != shape:
        return None
    m = value.detach().to("cpu")
    m = m == 0 if inverted else m != 0
    return m.bool()


def read_call(
    module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    role: str = "model",
    root: dict[str, Any] | None = None,
) -> Call:
    """B, T, the padding mask and the ids of one call (see the module docstring). ``role``:
    'model', 'encoder' or 'decoder'; ``root``: the root call's bound arguments (stacks)."""
    import torch

    named = bind(module, args, kwargs)
    ids, shape = _ids_and_shape(named)
    if role == "model":
        mask = named.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.ndim == 2:
            got = (int(mask.shape[0]), int(mask.shape[1]))
            if shape is not None and got != shape:
                raise CaptureError(f"attention_mask shape {got} does not match the input {shape}")
            return Call(got, _mask_of(mask, None), ids)
        return Call(shape, None, ids)
    found = _stack_mask(named, shape, role, root)
    if shape is None and found is not None:
        shape = (int(found.shape[0]), int(found.shape[1]))
    return Call(shape, found, ids)


def _ids_and_shape(named: dict[str, Any]) -> tuple[Any, tuple[int, int] | None]:
    """The call's ids (or None) and (B, T) from them or from ``inputs_embeds``."""
    import torch

    ids = named.get("input_ids")
    first = named.get("#first")
    if ids is None and isinstance(first, torch.Tensor) and first.ndim == 2:
        ids = first
    embeds = named.get("inputs_embeds")
    if isinstance(ids, torch.Tensor) and ids.ndim == 2:
        return ids, (int(ids.shape[0]), int(ids.shape[1]))
    if isinstance(embeds, torch.Tensor) and embeds.ndim == 3:
        return ids, (int(embeds.shape[0]), int(embeds.shape[1]))
    return ids, None


def _stack_mask(
    named: dict[str, Any], shape: tuple[int, int] | None, role: str, root: dict[str, Any] | None
) -> Any:
    """A stack's padding mask, in the order of the module docstring (None: none found)."""
    found = None
    if root is not None:
        key = "decoder_attention_mask" if role == "decoder" else "attention_mask"
        found = _mask_of(root.get(key), shape)
    if found is None:
        found = _mask_of(named.get("attention_mask"), shape)
    for name, value in named.items():
        if found is not None:
            break
        if name.endswith("padding_mask") and not (role == "decoder" and name.startswith("encoder")):
            found = _mask_of(value, shape, inverted=True)
    return found


def probe_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any], bt: tuple[int, int], probe: str
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The root call's inputs with one sequence fewer (``probe`` 'batch': every tensor whose
    first axis is B loses its last row) or one token shorter ('length': every tensor [B, n, ...]
    with n >= 2 loses its last column); None when that leaves nothing."""
    import torch

    b, t = bt
    if (probe == "batch" and b < 2) or (probe == "length" and t < 2):
        return None

    def cut(v: Any) -> Any:
        if not isinstance(v, torch.Tensor) or v.ndim == 0 or int(v.shape[0]) != b:
            return v
        if probe == "batch":
            return v[: b - 1]
        if v.ndim >= 2 and int(v.shape[1]) >= 2:
            return v[:, : int(v.shape[1]) - 1]
        return v

    new_kwargs = {k: cut(v) for k, v in kwargs.items() if k not in _STATEFUL}
    if "use_cache" in kwargs:
        new_kwargs["use_cache"] = False
    return tuple(cut(a) for a in args), new_kwargs
