"""Shared by the fuzz tests (tests/test_fuzz_*.py): the hypothesis settings, the mutations of a
valid file, and the check that only the tool's own errors escape a reader."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from rmsnorm_eps.errors import RmsnormEpsError

FUZZ_EXAMPLES = int(os.environ.get("RMSNORM_EPS_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("RMSNORM_EPS_FUZZ_RANDOM", "") in ("", "0"),
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Where the fuzzers write their files (one directory per process).
FUZZ_WORK = Path(tempfile.mkdtemp(prefix="rmsnorm-eps-fuzz-"))


_BIG = [0, 1, 7, 255, 2**16 - 1, 2**31 - 1, 2**32 - 1, 2**62, 2**63 - 1, 2**64 - 1]
_SNIPPETS = [
    b"\x00",
    b"\xff\xfe",
    b"(",
    b")",
    b"[",
    b"{",
    b"}",
    b'"',
    b"'",
    b",",
    b":",
    b"\n",
    b"1e999",
    b"-1",
    b"NaN",
    b"nan",
    b"Infinity",
    b"*a",
    b"&a ",
    b"!!python/object:os.system",
    b"!!binary",
    b"? [a]",
    b"999999999999999999999",
    b"True",
    b"<f8",
    b"|O",
    b"<c16",
    b"'descr': '|O'",
    b"'shape': (99999999999,)",
    b"'fortran_order': 1",
    b"V8",
    b"::",
]


@st.composite
def mutations(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with 1 to 4 random edits applied in order."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        n = len(data)
        kind = draw(
            st.sampled_from(["flip", "truncate", "overwrite", "insert", "delete", "int", "snippet"])
        )
        pos = draw(st.integers(0, max(0, n - 1)))
        if kind == "flip" and n:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[pos : pos + len(chunk)] = chunk
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif kind == "int":  # a count, length or offset field set to an extreme value
            width = draw(st.sampled_from([4, 8]))
            value = draw(st.sampled_from(_BIG)) % (1 << (8 * width))
            data[pos : pos + width] = value.to_bytes(
                width, draw(st.sampled_from(["little", "big"]))
            )
        else:
            snippet = draw(st.sampled_from(_SNIPPETS))
            if draw(st.booleans()):
                data[pos : pos + len(snippet)] = snippet
            else:
                data[pos:pos] = snippet
    return bytes(data)


def fuzz_check(read: Callable[[Path], object], data: bytes, name: str) -> None:
    path = FUZZ_WORK / name
    path.write_bytes(data)
    with contextlib.suppress(RmsnormEpsError):  # the tool's own errors: expected here
        read(path)
