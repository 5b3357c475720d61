"""rmsnorm_eps.capture.arrow_size and its use by capture --dataset: the decoded size of an
Arrow IPC file read from its message headers equals what pyarrow's decoded buffers hold, and a
compressed file that decodes past the cap is refused before anything is decoded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


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
