"""Counting the bytes that leave a tensor's device for the host (benchmarks and tests).

:class:`TransferCounter` wraps, while active, the tensor methods that copy data to the host
whatever the device: ``.cpu()``, ``.to(<cpu>)`` (a device argument, or a CPU tensor argument),
``.tolist()`` and ``.item()``; each call adds the source tensor's size in bytes
(``numel * element_size``). ``.numpy()`` is not counted: it refuses a tensor on an accelerator,
so it never moves device data (on the host it is a view). On a CPU-only machine these calls
copy nothing, but they are exactly the calls that would copy on a GPU: counting them there
shows what device-agnostic code would move.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TransferCounter"]

_METHODS = ("cpu", "to", "tolist", "item")


def _is_cpu(target: Any) -> bool:
    import torch

    if isinstance(target, torch.Tensor):
        return target.device.type == "cpu"
    if isinstance(target, (str, torch.device)):
        return torch.device(target).type == "cpu"
    return False


class TransferCounter:
    """Context manager: ``bytes`` and ``calls`` count device -> host copies while it is active
    (see the module docstring)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0
        self._saved: dict[str, Any] = {}

    def _add(self, t: Any) -> None:
        self.bytes += int(t.numel()) * int(t.element_size())
        self.calls += 1

    def _counted(self, name: str) -> Any:
        """``torch.Tensor.<name>``, counting each call (``.to`` only with a CPU target)."""
        original = self._saved[name]

        def method(t: Any, *a: Any, **kw: Any) -> Any:
            target = kw.get("device", a[0] if a else None)
            if name != "to" or (target is not None and _is_cpu(target)):
                self._add(t)
            return original(t, *a, **kw)

        return method

    def __enter__(self) -> TransferCounter:
        import torch

        self._saved = {name: getattr(torch.Tensor, name) for name in _METHODS}
        for name in _METHODS:
            setattr(torch.Tensor, name, self._counted(name))
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        for name, fn in self._saved.items():
            setattr(torch.Tensor, name, fn)
        self._saved = {}
