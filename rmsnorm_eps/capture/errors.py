"""The capture's own error type (a user-caused problem: exit 2 on the command line)."""

from __future__ import annotations

from rmsnorm_eps.errors import RmsnormEpsError

__all__ = ["CaptureError"]


class CaptureError(RmsnormEpsError):
    """A model, module, input or layout the capture cannot handle; the message names it."""
