"""The streaming data path: threads, chunk sizes, layouts and bfloat16 give the same reports."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.reports.document import document
from rmsnorm_eps.sources.interface import open_sources


def same(a: object, b: object) -> bool:
    """Reports equal, NaN equal to NaN (compared as their canonical documents)."""
    return document(a) == document(b)


def _close(a: object, b: object, rel: float = 1e-14) -> bool:
    """Documents equal but for floats within ``rel`` (NaN equal to NaN): the figures of a row
    longer than one chunk are summed piece by piece, which may round the last bit of q
    differently from the sum over the whole row."""
    import math

    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    return a == b


def _acts(seed: int = 0, n: int = 300, d: int = 48) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, d)) * 10 ** rng.uniform(-4, 0, (n, 1))).astype(np.float32)
    x[5, 3] = np.nan
    x[17, 0] = np.inf
    x[40] = 0.0
    return x


def _layouts(tmp_path: Path, x: np.ndarray | None = None) -> dict[str, Path]:
    x = _acts() if x is None else x
    out = {}
    for name, arr in {
        "f32": x,
        "f16": x.astype(np.float16),
        "f64": x.astype(np.float64),
        "big": x.astype(">f4"),
        "fortran": np.asfortranarray(x),
        "three_d": x.reshape(10, 30, 48),
    }.items():
        out[name] = tmp_path / f"{name}.npy"
        np.save(out[name], arr)
    out["npz"] = tmp_path / "stored.npz"
    np.savez(out["npz"], a=x, b=x[:100].astype(np.float16))
    out["npz_c"] = tmp_path / "compressed.npz"
    np.savez_compressed(out["npz_c"], a=x, b=x[:100].astype(np.float16))
    return out


@pytest.mark.parametrize("raw", [True, False])
def test_threads_and_chunks_do_not_change_reports(tmp_path: Path, raw: bool) -> None:
    data = _acts() if raw else np.square(_acts())  # q dumps: squares (NaN, inf, 0 kept)
    for name, path in _layouts(tmp_path, data).items():
        ref = analyze_dump(path, 1e-5, raw=raw, threads=1, top_k=4)
        for threads in (1, 2, 3):
            for chunk in (100, 4096, 1 << 22):
                got = analyze_dump(path, 1e-5, raw=raw, threads=threads, chunk_bytes=chunk, top_k=4)
                if raw and chunk < 48 * 8:  # rows longer than a chunk: summed in pieces
                    assert _close(document(got), document(ref)), (name, threads, chunk)
                    assert got.violations == ref.violations, (name, threads, chunk)
                else:
                    assert same(got, ref), (name, threads, chunk)


def test_stored_npz_members_are_read_in_place(tmp_path: Path) -> None:
    paths = _layouts(tmp_path)
    stored = open_sources(paths["npz"]).sources
    assert all(s.data_offset is not None for s in stored)
    for s in stored:
        with open(paths["npz"], "rb") as fh:
            fh.seek(s.data_offset or 0)
            head = np.frombuffer(fh.read(16), dtype=s.dtype)
        assert np.array_equal(head, np.load(paths["npz"])[s.name].ravel()[: head.size], True)
    assert all(s.data_offset is None for s in open_sources(paths["npz_c"]).sources)
    with zipfile.ZipFile(paths["npz_c"]) as zf:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())


def test_iter_mapped_in_order_and_stops_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10_000, dtype=np.float64))
    (src,) = open_sources(path).sources
    seen = []
    for start, v in src.iter_mapped(333, lambda s, v: v.copy(), threads=2):
        seen.append((start, v))
    assert [s for s, _ in seen] == list(range(0, 10_000, 333))
    assert np.array_equal(np.concatenate([v for _, v in seen]), np.arange(10_000.0))
    gen = src.iter_mapped(100, lambda s, v: float(v[0]), threads=2)
    assert next(gen) == (0, 0.0)
    gen.close()  # pending reads are cancelled or awaited, the file is closed


def test_bfloat16_raw_and_q(tmp_path: Path, cli: Callable[..., object]) -> None:
    x = _acts()
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation: exact bf16 values
    as_f32 = (bits.astype(np.uint32) << 16).view(np.float32)
    np.save(tmp_path / "b.npy", bits)
    np.save(tmp_path / "f.npy", as_f32)
    got = analyze_dump(tmp_path / "b.npy", 1e-5, raw=True, dtype="bfloat16", top_k=3)
    ref = analyze_dump(tmp_path / "f.npy", 1e-5, raw=True, top_k=3)
    assert got.layers[0].dtype == "bfloat16"
    assert got.layers[0].worst == ref.layers[0].worst
    assert got.below_bound == ref.below_bound and got.nonfinite == ref.nonfinite
    # q values stored as bfloat16
    qbits = (np.square(as_f32).view(np.uint32) >> 16).astype(np.uint16)
    np.save(tmp_path / "qb.npy", qbits)
    qref = (qbits.astype(np.uint32) << 16).view(np.float32)
    np.save(tmp_path / "qf.npy", qref)
    a = analyze_dump(tmp_path / "qb.npy", 1e-5, dtype="bfloat16")
    b = analyze_dump(tmp_path / "qf.npy", 1e-5)
    assert a.layers[0].decades == b.layers[0].decades and a.violations == b.violations


def test_bfloat16_ml_dtypes_npy(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _acts().astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "m.npy", x)  # written with descr '<V2'
    np.save(tmp_path / "f.npy", x.astype(np.float32))
    got = analyze_dump(tmp_path / "m.npy", 1e-5, raw=True, dtype="bfloat16")
    ref = analyze_dump(tmp_path / "f.npy", 1e-5, raw=True)
    assert got.layers[0].worst == ref.layers[0].worst and got.violations == ref.violations


def test_bfloat16_cli_paths(tmp_path: Path, cli: Callable[..., object]) -> None:
    np.save(tmp_path / "b.npy", np.full((4, 8), 0x3F80, np.uint16))  # all 1.0
    ok = cli(
        "ratio", "--eps", "1e-5", "-q", str(tmp_path / "b.npy"), "--raw", "--dtype", "bfloat16"
    )
    assert ok.exit_code == 0 and "4 inputs" in ok.stderr  # type: ignore[attr-defined]
    no_flag = cli("ratio", "--eps", "1e-5", "-q", str(tmp_path / "b.npy"), "--raw")
    assert no_flag.exit_code == 2  # type: ignore[attr-defined]
    assert "pass --dtype bfloat16" in no_flag.stderr  # type: ignore[attr-defined]
    bad = cli("ratio", "--eps", "1e-5", "-q", str(tmp_path / "b.npy"), "--dtype", "float8")
    assert bad.exit_code == 2 and "'float8' is not one of bfloat16" in bad.stderr  # type: ignore[attr-defined]
    zero = cli("ratio", "--eps", "1e-5", "-q", str(tmp_path / "b.npy"), "--threads", "0")
    assert zero.exit_code == 2  # type: ignore[attr-defined]


def test_library_rejects_bad_threads_and_dtype(tmp_path: Path) -> None:
    np.save(tmp_path / "q.npy", np.ones(4))
    with pytest.raises(InvalidParameterError):
        analyze_dump(tmp_path / "q.npy", 1e-5, threads=0)
    with pytest.raises(InvalidParameterError):
        open_sources(tmp_path / "q.npy", dtype="float8")
    np.save(tmp_path / "i.npy", np.ones(4, np.int32))  # int16 holds bfloat16 bits (issue 15)
    with pytest.raises(InputFileError, match="unsupported dtype int32"):
        open_sources(tmp_path / "i.npy", dtype="bfloat16")
