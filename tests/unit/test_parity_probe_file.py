"""rmsnorm_eps.parity.probe_file: a probe file is deterministic bytes, loads back exactly, and
a file that is not a probe file is refused."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.parity.probe_file import load_probes, probe_bytes, write_probes
from rmsnorm_eps.parity.probes import make_probes


def test_probe_file_round_trip(tmp_path: Path) -> None:
    probes = make_probes(8, 1e-6, dtype="float16", seed=1)
    path = tmp_path / "p.npz"
    write_probes(probes, path)
    assert path.read_bytes() == probe_bytes(probes)
    back = load_probes(path)
    np.testing.assert_array_equal(back.inputs, probes.inputs)
    np.testing.assert_array_equal(back.reference, probes.reference)
    assert (back.eps, back.dtype, back.seed) == (probes.eps, probes.dtype, probes.seed)


def test_a_file_missing_members_is_refused(tmp_path: Path) -> None:
    probes = make_probes(8, 1e-6)
    src = zipfile.ZipFile(io.BytesIO(probe_bytes(probes)))
    path = tmp_path / "cut.npz"
    with zipfile.ZipFile(path, "w") as out:
        for info in src.infolist()[1:]:  # drop the first member
            out.writestr(info, src.read(info))
    with pytest.raises(InputFileError):
        load_probes(path)
