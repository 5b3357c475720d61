"""rmsnorm_eps.capture.transfers: the calls that copy to the host are counted with their bytes
(numel * element_size), only while the counter is active, and the methods are restored."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.transfers import TransferCounter  # noqa: E402


def test_counts_host_copies() -> None:
    x = torch.zeros(3, 4, dtype=torch.float32)
    methods = (torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.tolist, torch.Tensor.item)
    with TransferCounter() as t:
        x.cpu()
        x.to("cpu")
        x[0, 0].item()
        x[0].tolist()
        x.to(torch.float64)  # a dtype change on the same device: not a transfer
        x.numpy()  # a view on the host, refused on an accelerator: not counted
    assert t.calls == 4
    assert t.bytes == 48 + 48 + 4 + 16
    x.cpu()
    assert t.calls == 4
    assert (torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.tolist, torch.Tensor.item) == methods
