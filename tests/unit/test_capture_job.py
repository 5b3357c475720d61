"""capture/job.py: the texts of the one source given, a capture run from texts to the files
written and the totals rank 0 reports, as a library call (no CLI); and no command imports a
private name of another command's module."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.job import read_texts

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give the input: --text"),
        ({"texts": ["a"], "dataset": Path("x")}, "give one input: --text or --dataset, not both"),
        ({"texts": ["a"], "field": "t"}, "--field applies to --text-file"),
    ],
)
def test_read_texts_refuses_no_source_or_two(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"texts": [], "text_file": None, "field": None, "dataset": None}
    args.update(kwargs)
    with pytest.raises(CaptureError, match=message):
        read_texts(split="train", max_samples=None, **args)  # type: ignore[arg-type]


def test_read_texts_keeps_max_samples(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("one\ntwo\nthree\n")
    assert read_texts([], f, None, None, "train", 2) == ("one", "two")
    assert read_texts(["a", "b"], None, None, None, "train", None) == ("a", "b")


def test_no_command_imports_a_private_name_of_another_command() -> None:
    for path in sorted((ROOT / "rmsnorm_eps" / "cli").glob("*_cmd.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_cmd"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, (path.name, node.module, private)


def test_a_capture_run_as_a_library_call(model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from rmsnorm_eps.capture.job import Job, finish_capture, run_capture
    from rmsnorm_eps.capture.loading import load_model
    from rmsnorm_eps.sources import open_sources

    loaded = load_model(model_dir)
    job = Job(rank=0, world=1, summary_only=False, min_ratio=None)
    texts = ["the quick brown fox", "hello", "the lazy dog jumps"]
    run = run_capture(loaded, texts, job, sort_by_length=True, batch_size=2)
    assert sorted(run.order) == [0, 1, 2] and run.order[0] == 1  # the shortest text first
    out = tmp_path / "q.npz"
    done = finish_capture(run, loaded, job, 0.01, out, tmp_path / "c.yaml")
    assert (done.sequences, done.tokens) == (3, 4 + 1 + 4)
    assert done.modules == 5 and done.report is not None and done.not_analysed == ()
    assert (tmp_path / "c.yaml").is_file()
    batch = np.load(out)["model.norm::batch"]
    assert sorted(set(batch.tolist())) == [0, 1, 2]  # the text's index, not the run order
    assert len(open_sources(out).sources) == 5
