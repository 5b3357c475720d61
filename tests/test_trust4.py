"""Issue 21's last gaps: work that grew with something other than the file.

- one tensor saved under many names is read and analysed once (time follows the bytes stored,
  not the number of names), with results equal to analysing separate copies;
- a compressed Fortran-order ``--raw`` member of more rows than one block is decompressed once;
- a compressed Arrow IPC dataset file is checked by its decoded size before it is decoded;
- a distributed capture folds the ranks' summaries one at a time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rmsnorm_eps.analysis as analysis
import rmsnorm_eps.compare.analysis as compare_analysis
from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.compare.analysis import compare_dump

torch = pytest.importorskip("torch")


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[str]:
    calls: list[str] = []
    inner = getattr(module, name)

    def counted(src: Any, *args: Any, **kw: Any) -> Any:
        calls.append(src.name)
        return inner(src, *args, **kw)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The same tensor under 300 names (plus one other tensor), and the same data with every
    name holding its own copy."""
    rng = np.random.default_rng(21)
    q = torch.from_numpy(rng.uniform(1e-8, 1e-3, size=(4, 64)).astype(np.float32))
    other = torch.from_numpy(np.array([1e-12, 5.0], np.float32))
    names = [f"model.layers.{i}.input_layernorm" for i in range(300)]
    one: dict[str, Any] = dict.fromkeys(names, q)
    one["final_norm"] = other
    copies: dict[str, Any] = {n: q.clone() for n in names}
    copies["final_norm"] = other.clone()
    torch.save(one, tmp_path / "shared.pt")
    torch.save(copies, tmp_path / "copies.pt")
    return tmp_path / "shared.pt", tmp_path / "copies.pt", names


def _layers(report: Any) -> list[Any]:
    return [dataclasses.asdict(layer) for layer in report.layers]


def test_one_tensor_under_many_names_is_analysed_once(
    shared: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, copies, names = shared
    calls = _counting(monkeypatch, analysis, "_analyze_layer")
    report = analyze_dump(path, 1e-6, top_k=3)
    assert len(calls) == 2  # the shared tensor once, the other one once
    calls.clear()
    separate = analyze_dump(copies, 1e-6, top_k=3)
    assert len(calls) == 301
    assert [ly.name for ly in report.layers] == [*names, "final_norm"]
    assert _layers(report) == _layers(separate)
    assert report.violations == separate.violations == 300 * report.layers[0].violations + 1


def test_names_with_their_own_eps_are_analysed_apart(
    shared: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, copies, names = shared
    calls = _counting(monkeypatch, analysis, "_analyze_layer")
    eps = {n: (1e-6 if i % 2 else 1e-5) for i, n in enumerate(names)} | {"final_norm": 1e-6}
    report = analyze_dump(path, eps)
    assert len(calls) == 3  # two eps for the shared tensor, and the other tensor
    assert _layers(report) == _layers(analyze_dump(copies, eps))
    assert {ly.eps for ly in report.layers} == {1e-6, 1e-5}


def test_compare_reuses_the_shared_tensor_too(
    shared: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, copies, _ = shared
    calls = _counting(monkeypatch, compare_analysis, "_compare_layer")
    report = compare_dump(path, "eps=1e-5", "eps=1e-6")
    assert len(calls) == 2
    assert _layers(report) == _layers(compare_dump(copies, "eps=1e-5", "eps=1e-6"))


def test_views_of_one_storage_at_other_offsets_are_not_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = torch.arange(1, 9, dtype=torch.float32) * 1e-6
    torch.save({"a": base[:4], "b": base[4:], "c": base[:4]}, tmp_path / "views.pt")
    calls = _counting(monkeypatch, analysis, "_analyze_layer")
    report = analyze_dump(tmp_path / "views.pt", 1e-6)
    assert calls == ["a", "b"]  # c is a's bytes again; b starts elsewhere
    a, b, c = report.layers
    assert (a.min_q, b.min_q, c.min_q) == pytest.approx((1e-6, 5e-6, 1e-6), rel=1e-6, abs=0)
    assert c.name == "c" and dataclasses.replace(c, name="a") == a


# ---------------------------------------------------------------- distributed capture


def _rank_payloads(tmp_path: Path, n: int) -> list[bytes]:
    """Summary documents of ``n`` ranks over parts of one q array (rank 1 ran no sample)."""
    import json

    from rmsnorm_eps.merge import summary_document

    rng = np.random.default_rng(5)
    out: list[bytes] = []
    for r in range(n):
        if r == 1:
            out.append(b"")
            continue
        np.save(tmp_path / "part.npy", rng.uniform(1e-9, 1e-3, size=50).astype(np.float32))
        rep = analyze_dump(tmp_path / "part.npy", 1e-6, top_k=3)
        out.append(json.dumps(summary_document(rep), allow_nan=False).encode())
    return out


def test_distributed_reduction_folds_one_rank_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reduce_summary takes the ranks' documents one at a time (each made when asked for, the
    previous one already released) and gives the merge of them all."""
    import gc
    import warnings

    import torch.distributed as dist

    from rmsnorm_eps.capture import distributed
    from rmsnorm_eps.merge import merge_summaries, summary_from_document
    from rmsnorm_eps.merge.summary_format import ShardSummary, parse_summary_json

    payloads = _rank_payloads(tmp_path, 5)
    asked: list[int] = []

    def held() -> int:
        """Shard summaries alive with their layers (the merge keeps only the first's head)."""
        gc.collect()
        with warnings.catch_warnings():  # isinstance on every object touches deprecated names
            warnings.simplefilter("ignore")
            return sum(1 for o in gc.get_objects() if isinstance(o, ShardSummary) and o.layers)

    def in_turn(data: bytes, group: Any = None) -> Any:
        for p in payloads:
            assert held() == 0, "an earlier rank's summary is still held"
            asked.append(len(p))
            yield p

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed, "bytes_in_turn", in_turn)
    report = distributed.reduce_summary(None, "whole")
    shards = [
        summary_from_document(parse_summary_json(p), f"rank{r}")
        for r, p in enumerate(payloads)
        if p
    ]
    expected = merge_summaries(shards)
    assert len(asked) == 5
    assert report.source == "whole" and report.shards == ()
    assert [ly.count for ly in report.layers] == [200]
    assert report.layers[0].min_q == expected.layers[0].min_q
    assert report.layers[0].below_bound == expected.layers[0].below_bound
    assert [w.index for w in report.layers[0].worst] == [w.index for w in expected.layers[0].worst]


def test_merge_summaries_takes_an_iterator_and_refuses_an_empty_one(tmp_path: Path) -> None:
    from rmsnorm_eps.errors import InvalidParameterError
    from rmsnorm_eps.merge import merge_summaries

    with pytest.raises(InvalidParameterError, match="at least one summary"):
        merge_summaries(iter([]))


# ---------------------------------------------------------------- compressed Fortran order


def _deflated(path: Path, x: np.ndarray) -> Path:
    import io
    import zipfile

    buf = io.BytesIO()
    np.save(buf, x)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", buf.getvalue())
    return path


def _raw_q(path: Path, quantity: Any = "q", **kw: Any) -> np.ndarray:
    from rmsnorm_eps.engine import iter_q_chunks
    from rmsnorm_eps.sources import open_sources

    (src,) = open_sources(path, **kw).sources
    shape, order, _, chunks = iter_q_chunks(src, True, 96, quantity=quantity)
    flat = np.full(int(np.prod(shape)), -1.0)
    for start, q in chunks:
        flat[start : start + q.size] = q
    return flat.reshape(shape, order=order)


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Blocks of 7 rows; every full pass over a stream-only (compressed) source is counted; the
    temporary copies go to their own directory."""
    import tempfile

    from rmsnorm_eps import engine
    from rmsnorm_eps.sources.raw import RawArraySource

    monkeypatch.setattr(engine, "F_BLOCK_ROWS", 7)
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    passes: list[str] = []
    inner = RawArraySource.iter_elements

    def counted(self: RawArraySource, per: int) -> Any:
        if self.data_offset is None:
            passes.append(self.name)
        return inner(self, per)

    monkeypatch.setattr(RawArraySource, "iter_elements", counted)
    return passes


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", ">f4"])
@pytest.mark.parametrize("quantity", ["q", "v"])
def test_compressed_fortran_member_is_decompressed_once(
    tmp_path: Path, streams: list[str], dtype: str, quantity: Any
) -> None:
    rng = np.random.default_rng(3)
    x = np.asfortranarray((rng.standard_normal((4, 9, 5)) * 3 + 1).astype(dtype))
    if dtype == "float64" and quantity == "q":
        x[0, 0, :] = 1e154  # the sum of squares overflows float64, q does not: scaled sums
    wide = x.astype(np.float64)
    if quantity == "q":
        m = np.max(np.abs(wide), axis=-1, keepdims=True)
        want = np.mean((wide / m) ** 2, axis=-1) * m[..., 0] ** 2
    else:
        want = np.var(wide, axis=-1)
    got = _raw_q(_deflated(tmp_path / "f.npz", x), quantity)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert streams == ["x"]  # one pass over the deflated stream for 36 rows (6 blocks)
    assert list((tmp_path / "tmp").iterdir()) == []  # the copy is removed


def test_compressed_fortran_bfloat16(tmp_path: Path, streams: list[str]) -> None:
    import ml_dtypes

    rng = np.random.default_rng(4)
    x = np.asfortranarray(rng.standard_normal((30, 6)).astype(ml_dtypes.bfloat16))
    bits = np.asfortranarray(x.view(np.uint16))
    got = _raw_q(_deflated(tmp_path / "b.npz", bits), dtype="bfloat16")
    wide = x.astype(np.float64)
    np.testing.assert_allclose(got, np.mean(wide * wide, axis=-1), rtol=1e-12)
    assert streams == ["x"]


def test_compressed_fortran_without_temporary_space_is_one_line(
    tmp_path: Path, streams: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from rmsnorm_eps.errors import InputFileError

    x = np.asfortranarray(np.ones((30, 6), np.float32))
    path = _deflated(tmp_path / "f.npz", x)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    with pytest.raises(InputFileError, match=r"temporary copy of 720 bytes.*has 1000 free"):
        _raw_q(path)
    assert streams == []


# ---------------------------------------------------------------- Arrow datasets


def _arrow(path: Path, texts: list[str], compression: str | None, file_format: bool) -> Path:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"text": texts, "n": list(range(len(texts)))})
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink:
        new = pa.ipc.new_file if file_format else pa.ipc.new_stream
        writer = new(sink, table.schema, options=options)
        writer.write_table(table, max_chunksize=3)
        writer.close()
    return path


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
@pytest.mark.parametrize("file_format", [False, True])
def test_arrow_decoded_size_equals_the_decoded_buffers(
    tmp_path: Path, compression: str | None, file_format: bool
) -> None:
    """Read from the headers alone, the size is what pyarrow's decoded buffers hold."""
    pa = pytest.importorskip("pyarrow")
    from rmsnorm_eps.capture.arrow_size import arrow_decoded_size

    texts = [f"text {i} " * (i + 1) for i in range(10)]
    path = _arrow(tmp_path / "d.arrow", texts, compression, file_format)
    with pa.OSFile(str(path)) as src:
        table = (pa.ipc.open_file if file_format else pa.ipc.open_stream)(src).read_all()
    buffers = sum(
        b.size for col in table.columns for ch in col.chunks for b in ch.buffers() if b is not None
    )
    size = arrow_decoded_size(path)
    assert (size.decoded, size.rows) == (buffers, 10)
    assert arrow_decoded_size(path, stop_after_rows=4).rows == 6  # batches of 3 rows


def test_compressed_arrow_bomb_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 MB of text in a few KB of zstd: refused from the headers; nothing is decoded."""
    from rmsnorm_eps.capture import inputs
    from rmsnorm_eps.errors import InputFileError

    monkeypatch.setattr(inputs, "MAX_DATASET_BYTES", 32 << 20)
    path = _arrow(tmp_path / "bomb.arrow", ["a" * (40 << 20)], "zstd", False)
    assert path.stat().st_size < 64 << 10

    def decoded(*_: Any) -> None:
        raise AssertionError("the dataset was decoded")

    monkeypatch.setattr(inputs, "_library_texts", decoded)
    with pytest.raises(InputFileError, match=r"decodes to over 4194\d+ bytes, over the 32 MiB"):
        inputs.read_dataset(path)
    (tmp_path / "dir").mkdir()
    path.rename(tmp_path / "dir" / "data-00000-of-00001.arrow")
    with pytest.raises(InputFileError, match=r"decodes to over"):
        inputs.read_dataset(tmp_path / "dir")


def test_arrow_that_does_not_parse_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from rmsnorm_eps.capture.inputs import read_dataset
    from rmsnorm_eps.errors import InputFileError

    good = _arrow(tmp_path / "d.arrow", ["one", "two"], "lz4", False).read_bytes()
    for i, data in enumerate([good[:40], b"\xff\xff\xff\xff\xff\xff\xff\x7f" + good[8:]]):
        bad = tmp_path / f"bad{i}.arrow"
        bad.write_bytes(data)
        with pytest.raises(InputFileError, match=r"cannot read the dataset"):
            read_dataset(bad)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_arrow_within_the_cap_is_read(tmp_path: Path, compression: str | None) -> None:
    pytest.importorskip("datasets")
    from rmsnorm_eps.capture.inputs import read_dataset

    texts = ["first text", "second", "third one", "fourth"]
    path = _arrow(tmp_path / "ok.arrow", texts, compression, False)
    assert read_dataset(path) == tuple(texts)
    assert read_dataset(path, max_samples=2) == tuple(texts[:2])
