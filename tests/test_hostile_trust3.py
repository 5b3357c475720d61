"""Issue 21 ("Trust, round 3"), the classes that need a real process or a capture: output paths
naming file descriptors and devices, capture's ``{rank}`` files and rank variables, and the
capture inputs (sizes capped before decoding, unencodable text, lines split at ``\\n`` only,
third-party loggers silent, model configs that cannot be built).

Each failure is exactly one stderr line ``rmsnorm-eps: error: ...`` and exit 2; no traceback,
no hang (every process runs under a timeout), no file but the named output written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.atomic import atomic_write_text, in_place_target
from rmsnorm_eps.errors import InputFileError

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def _shell(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` through sh, ``$RMS`` being ``python -m rmsnorm_eps``."""
    full = _env(**env)
    full["RMS"] = f"{sys.executable} -m rmsnorm_eps"
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=full, cwd=cwd, timeout=120
    )


def _one_error(res: subprocess.CompletedProcess[str], message: str) -> None:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("rmsnorm-eps: error: "), res.stderr
    assert message in lines[0], res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


# ---------------------------------------------------------------- output paths


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    np.save(tmp_path / "q.npy", np.array([1e-9, 1.0], np.float32))
    return tmp_path / "q.npy"


def test_output_to_dev_stdout_lands_in_the_redirected_file(tmp_path: Path, dump: Path) -> None:
    """``-o /dev/stdout > file`` (and ``>>``, ``/dev/fd/1``, ``/proc/self/fd/1``, a symlink to
    /dev/stdout): the report is in that file, appended after what was there with ``>>``;
    /dev/stdout stays a symlink (before: 0 bytes, and the symlink replaced by a file)."""
    before = os.readlink("/dev/stdout")
    for target in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        res = _shell(
            f"$RMS ratio --eps 1e-5 -q q.npy --format json -o {target} > out.json", tmp_path
        )
        assert res.returncode == 1, res.stderr
        assert json.loads((tmp_path / "out.json").read_text())["summary"]["violations"] == 1
    (tmp_path / "link").symlink_to("/dev/stdout")
    (tmp_path / "log.txt").write_text("kept\n")
    res = _shell("$RMS ratio --eps 1e-5 -q q.npy --format json -o link >> log.txt", tmp_path)
    assert res.returncode == 1, res.stderr
    text = (tmp_path / "log.txt").read_text()
    assert text.startswith("kept\n{") and '"violations": 1' in text
    res = _shell("$RMS ratio --eps 1e-5 -q q.npy --report json=/dev/stdout > rep.json", tmp_path)
    assert res.returncode == 1 and '"violations": 1' in (tmp_path / "rep.json").read_text()
    assert os.readlink("/dev/stdout") == before and (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link",
        "log.txt",
        "out.json",
        "q.npy",
        "rep.json",
    ]


def test_stdout_aimed_at_an_input_is_refused(tmp_path: Path, dump: Path) -> None:
    """The identity check resolves /dev/stdout to the file it is: here the dump itself, opened
    for appending (``>>`` keeps its bytes), so writing the report there would destroy it."""
    data = dump.read_bytes()
    res = _shell("$RMS ratio --eps 1e-5 -q q.npy -o /dev/stdout >> q.npy", tmp_path)
    _one_error(res, "is the same file as input")
    assert dump.read_bytes() == data


def test_in_place_targets() -> None:
    assert in_place_target(Path("/dev/stdout")) == 1
    assert in_place_target(Path("/dev/fd/2")) == 2
    assert in_place_target(Path("/proc/self/fd/7")) == 7
    assert in_place_target(Path("/dev/null")) is True
    assert in_place_target(Path("/proc/self/status")) is True
    assert in_place_target(Path("report.json")) is False


def test_a_symlink_to_a_device_is_not_replaced(tmp_path: Path) -> None:
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    atomic_write_text(link, "x")
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    with pytest.raises(InputFileError, match="cannot write"):
        atomic_write_text(Path("/dev/fd/987"), "x")


# ---------------------------------------------------------------- capture: ranks


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model directory whose config.json is all the capture reads before its inputs and
    outputs are checked (nothing loads it: every case fails before)."""
    pytest.importorskip("transformers")
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama", "num_attention_heads": 4}')
    return d


def _capture(cwd: Path, model: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmsnorm_eps", "capture", "--model", str(model), *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=cwd,
        timeout=120,
    )


def test_rank_output_is_checked_for_every_rank(tmp_path: Path) -> None:
    """``--save-data 't{rank}.txt'`` would overwrite ``--text-file t0.txt`` on rank 0, whichever
    rank checks it (before: the unexpanded path was compared)."""
    (tmp_path / "t0.txt").write_text("hello fox\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    job = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    args = ("--text-file", "t0.txt", "--save-data", "t{rank}.txt")
    res = _capture(tmp_path, tmp_path / "m", *args, **job)
    _one_error(res, "--save-data t0.txt is the same file as input --text-file t0.txt")
    assert (tmp_path / "t0.txt").read_text() == "hello fox\n"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5 is outside 0 to 1 (WORLD_SIZE=2)"),
        ({"RANK": "-1"}, "RANK=-1 is outside 0 to 0"),
        ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 but RANK is not set"),
        ({"WORLD_SIZE": "2", "RANK": "1"}, "WORLD_SIZE=2 but MASTER_ADDR is not set"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be from 1 to 65536"),
        ({"RANK": "1e3"}, "RANK='1e3' is not an integer"),
    ],
)
def test_rank_variables_are_validated(tmp_path: Path, env: dict[str, str], message: str) -> None:
    """Before: RANK=5 WORLD_SIZE=2 and RANK=-1 waited forever, WORLD_SIZE without RANK was an
    internal error."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    res = _capture(tmp_path, tmp_path / "m", "--text", "hi", "--save-data", "q{rank}.npz", **env)
    _one_error(res, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


# ---------------------------------------------------------------- capture: inputs


def test_jsonl_lines_end_at_newline_only(tmp_path: Path) -> None:
    from rmsnorm_eps.capture.inputs import read_text_file

    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"text": "a\u2028b\x85c"}, ensure_ascii=False) + "\r\n" + '{"text": "d"}\n',
        encoding="utf-8",
    )
    assert read_text_file(path) == ("a\u2028b\x85c", "d")
    plain = tmp_path / "t.txt"
    plain.write_text("one\u2028still one\x0cand\r\ntwo\n", encoding="utf-8")
    assert read_text_file(plain) == ("one\u2028still one\x0cand", "two")


def test_lone_surrogate_and_text_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmsnorm_eps.capture import inputs

    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "a \\ud800 b"}\n')
    with pytest.raises(InputFileError, match=r"line 2: the text holds U\+D800, a lone surrogate"):
        inputs.read_text_file(path)
    with pytest.raises(InputFileError, match=r"--text: text 1: the text holds U\+DCED"):
        inputs.check_texts(["fine", "a\udced"])  # argv's undecodable bytes
    monkeypatch.setattr(inputs, "MAX_TEXT_CHARS", 10)
    monkeypatch.setattr(inputs, "MAX_TOTAL_CHARS", 30)
    (tmp_path / "long.txt").write_text("short\n" + "x" * 11 + "\n")
    with pytest.raises(InputFileError, match="line 2: a text of 11 characters, over the 10"):
        inputs.read_text_file(tmp_path / "long.txt")
    texts = inputs._Texts(tmp_path / "d.parquet")
    for i in range(3):
        texts.add("abcdefgh", f"row {i}")
    with pytest.raises(InputFileError, match="row 3: over 30 characters of text in all"):
        texts.add("abcdefgh", "row 3")
    (tmp_path / "big.txt").write_text("a\n" * 20)
    with pytest.raises(InputFileError, match="40 bytes of text, over the 30 a capture reads"):
        inputs.read_text_file(tmp_path / "big.txt")


def test_zstd_parquet_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text that zstd shrinks a thousandfold: refused from the file's metadata, without
    decoding it (memory: far below the text's size)."""
    pytest.importorskip("datasets")
    import tracemalloc

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmsnorm_eps.capture import inputs

    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"text": ["ok", "a" * (8 << 20)]}), path, compression="zstd")
    assert path.stat().st_size < 64 << 10
    monkeypatch.setattr(inputs, "MAX_TOTAL_CHARS", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(InputFileError, match=r"column 'text' decodes to over \d+ bytes"):
            inputs.read_dataset(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    small = tmp_path / "small.parquet"
    pq.write_table(pa.table({"text": ["one", "two", "three"]}), small, compression="zstd")
    assert inputs.read_dataset(small, max_samples=2) == ("one", "two")


def test_corrupt_dataset_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The datasets logger printed a second stderr line (with an absolute path): the refusal
    is the one error, and nothing else reaches stderr."""
    pytest.importorskip("datasets")
    from rmsnorm_eps.capture.inputs import read_dataset

    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"\0" * 40 + b"PAR1")
    for name in ("bad.jsonl", "bad.parquet"):
        with pytest.raises(InputFileError, match="cannot read the dataset"):
            read_dataset(tmp_path / name)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "bad.parquet"]


def test_unbuildable_model_config_is_one_line(tmp_path: Path, model_dir: Path) -> None:
    from rmsnorm_eps.capture.model_config import check_model_config

    bad = model_dir
    config: dict[str, Any] = json.loads((bad / "config.json").read_text())
    config["num_attention_heads"] = 0
    (bad / "config.json").write_text(json.dumps(config))
    res = _capture(tmp_path, bad, "--text", "hello fox", "--save-data", "q.npz")
    _one_error(res, "[num_attention_heads]: '0' is not a size: expected an integer >= 1")
    config["text_config"] = {"hidden_size": -4}
    config["num_attention_heads"] = 4
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputFileError, match=r"\[text_config.hidden_size\]: '-4' is not a size"):
        check_model_config(bad)
    (bad / "config.json").write_text('{"hidden_size": 8, "hidden_size": 0}')
    with pytest.raises(InputFileError, match="duplicate key 'hidden_size'"):
        check_model_config(bad)
    assert not (tmp_path / "q.npz").exists()
