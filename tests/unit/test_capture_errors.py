"""rmsnorm_eps.capture.errors: a capture problem is a user error (exit 2, one line)."""

from __future__ import annotations

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.errors import RmsnormEpsError


def test_capture_error_is_a_user_error() -> None:
    assert issubclass(CaptureError, RmsnormEpsError)
    assert str(CaptureError("model.norm: unknown norm")) == "model.norm: unknown norm"
