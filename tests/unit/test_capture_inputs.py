"""Capture inputs: plain text, JSON Lines, local dataset files (parquet, arrow, jsonl,
save_to_disk), the length-sorted batch plan, the rank shards, and the CLI on a tiny model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps.capture.inputs import (
    Batch,
    plan_batches,
    read_dataset,
    read_text_file,
    shard_batches,
)
from rmsnorm_eps.errors import InputFileError
from tests.helpers import TEXTS


# ---------------------------------------------------------------- readers
def test_plain_text_and_jsonl(tmp_path: Path) -> None:
    plain = tmp_path / "t.txt"
    plain.write_text('first text\n\n  \nsecond {"text": 1}\n', encoding="utf-8")
    assert read_text_file(plain) == ("first text", 'second {"text": 1}')
    lines = tmp_path / "t.jsonl"
    lines.write_text('{"text": "a b", "id": 1}\n\n{"text": "c\\nd", "other": [1]}\n')
    assert read_text_file(lines) == ("a b", "c\nd")  # default field "text"
    other = tmp_path / "t.data"
    other.write_text('{"prompt": "p1"}\n{"prompt": "p2"}\n')
    assert read_text_file(other, "prompt") == ("p1", "p2")  # --field makes any file JSON Lines


@pytest.mark.parametrize(
    ("content", "field", "message"),
    [
        ('{"text": "a"}\n{"text": "b"\n', None, "line 2: not a JSON object"),
        ('{"text": "a"}\n\n[1, 2]\n', None, "line 3: not a JSON object"),
        ('{"text": "a"}\n{"body": "b"}\n', None, "line 2: no field 'text'"),
        ('{"prompt": "a"}\n', "pro\x1bmpt", "line 1: no field 'pro\\x1bmpt'"),
        ('{"text": 5}\n', None, "line 1: field 'text' is int, not text"),
        ('{"text": NaN}\n', None, "line 1: not a JSON object"),
        ("\n\n", None, "holds no JSON line"),
    ],
)
def test_jsonl_errors_name_the_line_and_field(
    tmp_path: Path, content: str, field: str | None, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputFileError) as info:
        read_text_file(path, field)
    assert str(info.value).startswith(f"{path}: {message}")
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_dataset_files(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"text": TEXTS, "n": list(range(len(TEXTS)))})
    pq.write_table(table, tmp_path / "d.parquet")
    assert read_dataset(tmp_path / "d.parquet") == tuple(TEXTS)
    assert read_dataset(tmp_path / "d.parquet", max_samples=2) == tuple(TEXTS[:2])
    ds = datasets.Dataset.from_dict({"body": TEXTS})
    ds.to_json(str(tmp_path / "d.jsonl"))
    assert read_dataset(tmp_path / "d.jsonl", field="body") == tuple(TEXTS)
    with (
        pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    assert read_dataset(tmp_path / "d.arrow", max_samples=3) == tuple(TEXTS[:3])
    datasets.DatasetDict({"train": ds, "test": ds.select([4, 0])}).save_to_disk(
        str(tmp_path / "saved")
    )
    assert read_dataset(tmp_path / "saved", split="test", field="body") == (TEXTS[4], TEXTS[0])
    with pytest.raises(InputFileError, match=r"no split 'dev' \(it has test, train\)"):
        read_dataset(tmp_path / "saved", split="dev", field="body")
    with pytest.raises(InputFileError, match=r"d.parquet: no field 'body' \(columns: text, n\)"):
        read_dataset(tmp_path / "d.parquet", field="body")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(InputFileError, match="not a dataset file"):
        read_dataset(tmp_path / "d.txt")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputFileError, match=r"bad\.parquet: cannot read the dataset"):
        read_dataset(tmp_path / "bad.parquet")
    with pytest.raises(InputFileError, match="no such file or directory"):
        read_dataset(tmp_path / "none.parquet")


# ---------------------------------------------------------------- plan and shards
def test_plan_sorts_by_length_with_ties_by_index() -> None:
    lengths = [9, 3, 1, 5, 3]
    plan = plan_batches(lengths, 2)
    assert plan == (Batch((2, 1)), Batch((4, 3)), Batch((0,)))
    assert plan_batches(lengths, 2, sort=False) == (Batch((0, 1)), Batch((2, 3)), Batch((4,)))
    # every sample exactly once
    flat = sorted(i for b in plan_batches(lengths, 3) for i in b.samples)
    assert flat == list(range(5))


def test_shards_are_contiguous_disjoint_and_cover_the_plan() -> None:
    plan = tuple(Batch((i,)) for i in range(5))
    shards = [shard_batches(plan, r, 2) for r in range(2)]
    assert [len(s) for s in shards] == [3, 2]  # uneven
    assert shards[0] + shards[1] == plan  # rank 0 then rank 1 is the one-process order
    few = [shard_batches(plan[:1], r, 3) for r in range(3)]
    assert [len(s) for s in few] == [1, 0, 0]  # ranks with no sample
    with pytest.raises(Exception, match="rank 2 is not in a world of 2"):
        shard_batches(plan, 2, 2)


# ---------------------------------------------------------------- CLI
def _dump(cli: Callable[..., Any], d: Path, out: Path, *args: str) -> dict[str, np.ndarray]:
    r = cli("capture", "--model", str(d), *args, "--save-data", str(out), "--batch-size", "2")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("\n") == 1 and "captured" in r.stderr  # no progress bar: not a tty
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_cli_inputs_give_the_same_dump(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    plain = tmp_path / "t.txt"
    plain.write_text("\n".join(TEXTS) + "\n")
    lines = tmp_path / "t.jsonl"
    lines.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in TEXTS))
    pq.write_table(pa.table({"prompt": TEXTS}), tmp_path / "t.parquet")
    ref = _dump(cli, model_dir, tmp_path / "a.npz", *[a for t in TEXTS for a in ("--text", t)])
    for name, args in {
        "plain": ("--text-file", str(plain)),
        "jsonl": ("--text-file", str(lines), "--field", "prompt"),
        "parquet": ("--dataset", str(tmp_path / "t.parquet"), "--field", "prompt"),
    }.items():
        got = _dump(cli, model_dir, tmp_path / f"{name}.npz", *args)
        assert got.keys() == ref.keys(), name
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{name} {k}")
    assert ref["model.norm::batch"].tolist() == [0] * 9 + [1] * 3 + [2] + [3] * 5 + [4] * 3
    # --max-samples
    got = _dump(cli, model_dir, tmp_path / "m.npz", "--text-file", str(plain), "--max-samples", "2")
    assert got["model.norm::batch"].tolist() == [0] * 9 + [1] * 3


def test_sorted_batches_map_back_to_the_sample_indices(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    args = [a for t in TEXTS for a in ("--text", t)]
    ref = _dump(cli, model_dir, tmp_path / "a.npz", *args)
    got = _dump(cli, model_dir, tmp_path / "s.npz", *args, "--sort-by-length")
    name = "model.layers.1.input_layernorm"
    # run order: samples 2 (1 token), 1, 4 (3 tokens each), 3 (5), 0 (9)
    assert got[f"{name}::batch"].tolist() == [2] + [1] * 3 + [4] * 3 + [3] * 5 + [0] * 9

    # the same (sample, position) carries the same q (up to the padding's rounding)
    def keyed(z: dict[str, np.ndarray]) -> dict[tuple[int, int], float]:
        pairs = zip(z[f"{name}::batch"], z[f"{name}::position"], z[name], strict=True)
        return {(int(b), int(p)): float(q) for b, p, q in pairs}

    a, s = keyed(ref), keyed(got)
    assert a.keys() == s.keys() and len(a) == 21
    for k in a:
        assert s[k] == pytest.approx(a[k], rel=1e-5), k


def test_cli_input_errors(cli: Callable[..., Any], model_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{"txt": "b"}\n')
    r = cli("capture", "--model", str(model_dir), "--text-file", str(bad), "--save-data", "q.npz")
    assert r.exit_code == 2 and r.stderr == f"rmsnorm-eps: error: {bad}: line 2: no field 'text'\n"
    r = cli(
        "capture", "--model", str(model_dir), "--text", "a", "--field", "x", "--save-data", "q.npz"
    )
    assert r.exit_code == 2 and "--field applies to --text-file" in r.stderr
    r = cli(
        "capture",
        "--model",
        str(model_dir),
        "--text",
        "a",
        "--dataset",
        "x",
        "--save-data",
        "q.npz",
    )
    assert r.exit_code == 2 and "give one input: --text or --dataset" in r.stderr
    r = cli(
        "capture",
        "--model",
        str(model_dir),
        "--text",
        "a",
        "--save-data",
        "q.npz",
        "--device",
        "tpu",
    )
    assert r.exit_code == 2 and "--device 'tpu' is not one of cpu, cuda, cuda:N, mps, auto" in (
        r.stderr
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=30),
    st.integers(1, 8),
    st.booleans(),
    st.integers(1, 5),
)
def test_batches_and_shards_cover_every_sample_once(
    lengths: list[int], size: int, sort: bool, world: int
) -> None:
    batches = plan_batches(lengths, size, sort=sort)
    samples = [i for b in batches for i in b.samples]
    assert sorted(samples) == list(range(len(lengths)))
    assert all(1 <= len(b.samples) <= size for b in batches)
    if sort:
        assert [lengths[i] for i in samples] == sorted(lengths)
    else:
        assert samples == list(range(len(lengths)))
    shards = [shard_batches(batches, r, world) for r in range(world)]
    assert [b for s in shards for b in s] == list(batches)  # contiguous, in order
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
