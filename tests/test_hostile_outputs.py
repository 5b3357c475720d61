"""Hostile names in the files the tool writes (summaries, parity records) and through
``parity`` and ``probe`` (issue 12, item 6).

A CI step may ``cat`` a written file, so its lines are read as the Actions runner reads them
(:func:`tests.runner_lines.assert_file_inert`); JSON and YAML files must still load back to the
exact names.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rmsnorm_eps.merge import load_summary
from rmsnorm_eps.parity import check_parity, make_probes, write_probes
from rmsnorm_eps.parity.record import render_record
from tests.helpers import FORMAT_NAMES as FORMATS
from tests.helpers import HOSTILE_NAMES as NAMES
from tests.runner_lines import assert_file_inert, assert_inert

# File names may not hold "/" or NUL; every other class of NAMES can be a file name.
FILE_NAMES = (
    "::error::p##[x]",
    "##vso[task.complete]a",
    "[conceal]<img src=x>",
    "a\x1b[31m\u202eb",
)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


# ----------------------------------------------------------------------------- summaries
def test_saved_summary_is_inert_and_round_trips(cli: Callable[..., Any], here: Path) -> None:
    q = np.array([1e-9, 1.0, 2.0], dtype=np.float32)
    np.savez("d.npz", **{name: q for name in NAMES})
    summary = Path("::s##[x].json")
    r = cli("ratio", "--eps", "1e-5", "--q-file", "d.npz", "--save-summary", str(summary))
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, "text")
    assert_file_inert(summary)
    text = summary.read_text("utf-8")
    assert "##" not in text and text.isascii()
    doc = json.loads(text)
    assert {layer["name"] for layer in doc["layers"]} == set(NAMES)
    assert {layer.name for layer in load_summary(summary).layers} == set(NAMES)
    # merged again: names exact in JSON, inert in every format
    for fmt in FORMATS:
        r = cli("merge", str(summary), "--format", fmt)
        assert r.exit_code == 1, r.stderr
        assert_inert(r.stdout, r.stderr, fmt)


# ----------------------------------------------------------------------------- parity, probe
@pytest.fixture
def parity_files(here: Path) -> tuple[Path, Path, str]:
    """A probe file and an .npz of outputs, both with hostile file names, the outputs under a
    hostile key beside a decoy."""
    probes = Path(FILE_NAMES[0] + ".npz")
    p = make_probes(16, 1e-6, dtype="float32")
    write_probes(p, probes)
    key = "out##[stop-commands]x\n:error:k<h1>[/x]\x1b"  # "::" would make it a companion
    actual = Path(FILE_NAMES[1] + ".npz")
    np.savez(actual, **{key: p.reference.astype(np.float32) * 1.5, "decoy": p.reference})
    return probes, actual, key


@pytest.mark.parametrize("fmt", FORMATS)
def test_parity_every_format(
    cli: Callable[..., Any], parity_files: tuple[Path, Path, str], fmt: str
) -> None:
    probes, actual, key = parity_files
    r = cli("parity", "-p", str(probes), "-a", str(actual), "--key", key, "--format", fmt)
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    if fmt == "json":
        doc = json.loads(r.stdout)
        assert doc["implementation"]["source"] == f"{actual} [{key}]"
        assert doc["probes"]["source"] == str(probes)


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".md"])
def test_parity_records_are_inert(
    cli: Callable[..., Any], parity_files: tuple[Path, Path, str], suffix: str
) -> None:
    probes, actual, key = parity_files
    record = Path(FILE_NAMES[2] + suffix)
    r = cli("parity", "-p", str(probes), "-a", str(actual), "--key", key, "--record", str(record))
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, "text")
    assert_file_inert(record)
    text = record.read_text("utf-8")
    if suffix == ".md":
        assert "<h1>" not in text and "##[" not in text
        return
    doc = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    assert doc["implementation"]["source"] == f"{actual} [{key}]"  # exact round trip
    assert doc["probes"]["source"] == str(probes)


def test_parity_key_errors_are_one_inert_line(
    cli: Callable[..., Any], parity_files: tuple[Path, Path, str]
) -> None:
    probes, actual, key = parity_files
    for bad in (key + "?", "##[add-mask]\n::warning::x"):
        r = cli("parity", "-p", str(probes), "-a", str(actual), "--key", bad)
        assert r.exit_code == 2, r.stderr
        assert len(r.stderr.splitlines()) == 1, r.stderr
        assert_inert(r.stdout, r.stderr, "text")
    r = cli("parity", "-p", str(probes), "-a", str(actual))  # two arrays, no --key
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert_inert(r.stdout, r.stderr, "text")


@pytest.mark.parametrize("fmt", ("text", "json"))  # probe reports no findings
def test_probe_every_format(cli: Callable[..., Any], here: Path, fmt: str) -> None:
    out = Path(FILE_NAMES[3] + ".npz")
    gain = Path("::g##[x]\x1b.npy")
    np.save(gain, np.ones(8, np.float32))
    r = cli(
        "probe", "--dim", "8", "--eps", "1e-6", "--gain", str(gain), "--save-data", str(out),
        "--format", fmt,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    assert out.exists()
    r = cli("parity", "-p", str(out), "-a", str(gain), "--format", fmt)  # wrong shape: exit 2
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_parity_shows_the_probe_files_gain_name_inert(
    cli: Callable[..., Any], here: Path, fmt: str
) -> None:
    """The gain file's name is stored in the probe file's metadata: data, shown escaped."""
    gain = Path("::g##[x]\x1b[link=e]<b>.npy")
    np.save(gain, np.ones(8, np.float32))
    r = cli("probe", "--dim", "8", "--eps", "1e-6", "--gain", str(gain), "--save-data", "p.npz")
    assert r.exit_code == 0, r.stderr
    with np.load("p.npz", allow_pickle=False) as z:
        np.save("out.npy", z["reference"].astype(np.float32) * 2)
    r = cli("parity", "-p", "p.npz", "-a", "out.npy", "--format", fmt, "--record", "r.md")
    assert r.exit_code == 1, r.stderr
    assert_inert(r.stdout, r.stderr, fmt)
    assert_file_inert(Path("r.md"))


# ----------------------------------------------------------------------------- record unit
@pytest.mark.parametrize("fmt", ["yaml", "json", "md"])
def test_render_record_escapes_every_class(fmt: str, tmp_path: Path) -> None:
    r = check_parity(lambda x, w=None: x.astype(np.float64), dim=8, eps=1e-6)
    hostile = "\n".join(NAMES[:-1]) + "\ud800\U0001f600::x##y"
    r = dataclasses.replace(r, actual_source=hostile, probe_source="::" + hostile)
    path = tmp_path / f"r.{fmt}"
    path.write_text(render_record(r, fmt), encoding="utf-8")
    assert_file_inert(path)
    text = render_record(r, fmt)
    if fmt == "md":
        assert "<img" not in text and "</details>" not in text
        return
    doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    assert doc["implementation"]["source"] == hostile
    assert doc["probes"]["source"] == "::" + hostile


# ----------------------------------------------------------------------------- output identity
def test_capture_outputs_never_overwrite_the_model_or_each_other(
    cli: Callable[..., Any], here: Path
) -> None:
    """capture's --out / --config-out: not a file of the model directory (its config.json,
    weights), not the texts file, not each other, under any spelling (symlink, hard link)."""
    model = here / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    texts = here / "texts.txt"
    texts.write_text("hello\n", encoding="utf-8")
    (here / "link.json").symlink_to(model / "config.json")
    os.link(texts, here / "hard.txt")
    base = ("capture", "--model", str(model), "--text-file", str(texts))
    for extra in (
        ("--save-data", str(model / "config.json")),
        ("--save-data", "link.json"),
        ("--save-data", "q.npz", "--config-out", "hard.txt"),
        ("--save-data", "q.npz", "--config-out", "q.npz"),
    ):
        r = cli(*base, *extra)
        assert r.exit_code == 2 and "is the same file as" in r.stderr, (extra, r.stderr)
        assert len(r.stderr.splitlines()) == 1
    assert (model / "config.json").read_text("utf-8") == "{}"
    assert texts.read_text("utf-8") == "hello\n" and not Path("q.npz").exists()
