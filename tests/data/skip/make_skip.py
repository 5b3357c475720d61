"""Write tests/data/skip/mixed.npz, the dump of the ``--skip-unreadable`` golden files: layer
``a`` reads cleanly (q/eps 100, 200, 100000 at eps 1e-5), ``b`` fails only while its data are
read (a flipped byte: bad CRC-32; its header is fine) and ``c`` holds a negative q.

    python tests/data/skip/make_skip.py      # from the repository root; same bytes every run
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from rmsnorm_eps.dumps import npy_bytes

HERE = Path(__file__).resolve().parent
_DATE = (1980, 1, 1, 0, 0, 0)


def mixed_bytes() -> bytes:
    members = {
        "a.npy": npy_bytes(np.array([[1e-3, 2e-3, 1.0]], np.float64)),
        "b.npy": npy_bytes(np.full(1000, 1.0)),
        "c.npy": npy_bytes(np.array([-1.0, 2.0])),
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    data = bytearray(buf.getvalue())
    data[data.index(b"b.npy") + len("b.npy") + 128 + 4000] ^= 0xFF  # inside b's stored data
    return bytes(data)


def main() -> None:
    (HERE / "mixed.npz").write_bytes(mixed_bytes())


if __name__ == "__main__":
    main()
