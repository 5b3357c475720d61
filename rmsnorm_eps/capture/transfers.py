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

from types import TracebackType
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
    (see the module docstring); :meth:`reset` starts a new count (e.g. per forward pass)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0
        self._saved: dict[str, Any] = {}

    def reset(self) -> None:
        self.bytes = 0
        self.calls = 0

    def _add(self, t: Any) -> None:
        self.bytes += int(t.numel()) * int(t.element_size())
        self.calls += 1

    def __enter__(self) -> TransferCounter:
        import torch

        saved = {name: getattr(torch.Tensor, name) for name in _METHODS}
        self._saved = saved
        counter = self

        def cpu(t: Any, *a: Any, **kw: Any) -> Any:
            counter._add(t)
            return saved["cpu"](t, *a, **kw)

        def to(t: Any, *a: Any, **kw: Any) -> Any:
            target = kw.get("device", a[0] if a else None)
            if target is not None and _is_cpu(target):
                counter._add(t)
            return saved["to"](t, *a, **kw)

        def tolist(t: Any) -> Any:
            counter._add(t)
            return saved["tolist"](t)

        def item(t: Any) -> Any:
            counter._add(t)
            return saved["item"](t)

        for name, fn in (("cpu", cpu), ("to", to), ("tolist", tolist), ("item", item)):
            setattr(torch.Tensor, name, fn)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import torch

        for name, fn in self._saved.items():
            setattr(torch.Tensor, name, fn)
        self._saved = {}
