"""Nothing skipped silently: an unreadable layer fails the run (exit 2) unless
--skip-unreadable, which lists it (text and JSON) and never exits 0."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from corpus.make_corpus import _q_values, npy, zip_bytes

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.reports.schema import load_schema

Cli = Callable[..., object]


def _dump(tmp_path: Path) -> Path:
    """Layer a is fine; b fails only while its data are read (bad CRC-32: its header is
    fine); c holds a negative q."""
    data = bytearray(
        zip_bytes(
            [
                ("a.npy", npy(_q_values())),
                ("b.npy", npy(np.full(10_000, 1.0))),
                ("c.npy", npy(np.array([-1.0, 2.0]))),
            ]
        )
    )
    # near the end of b's 80 KB of stored data: the CRC-32 fails only once it is read through
    at = data.index(b"b.npy") + len("b.npy") + 128 + 79_000
    data[at] ^= 0xFF
    path = tmp_path / "mixed.npz"
    path.write_bytes(bytes(data))
    return path


def test_default_fails_on_the_first_unreadable_layer(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"\[b\]: cannot read data: Bad CRC-32"):
        analyze_dump(_dump(tmp_path), 1e-5)


def test_library_lists_skipped_layers(tmp_path: Path) -> None:
    report = analyze_dump(_dump(tmp_path), 1e-5, skip_unreadable=True)
    assert [layer.name for layer in report.layers] == ["a"]
    assert [(u.name, u.problem.split(":")[0]) for u in report.skipped] == [
        ("b", "cannot read data"),
        ("c", "negative q -1.0 at index [0] (q is a mean of squares)"),
    ]
    cmp = compare_dump(
        _dump(tmp_path),
        parse_spec("eps=1e-5", "--from"),
        parse_spec("eps=1e-6", "--to"),
        skip_unreadable=True,
    )
    assert [u.name for u in cmp.skipped] == ["b", "c"] and cmp.layers[0].name == "a"


@pytest.mark.parametrize("command", ["ratio", "compare"])
def test_cli_skip_unreadable(tmp_path: Path, cli: Cli, command: str) -> None:
    path = _dump(tmp_path)
    args = (
        ["ratio", "--eps", "1e-5"]
        if command == "ratio"
        else ["compare", "--from", "eps=1e-5", "--to", "eps=1e-6"]
    )
    plain = cli(*args, "-q", str(path))
    assert plain.exit_code == 2  # type: ignore[attr-defined]
    assert "[b]: cannot read data" in plain.stderr  # type: ignore[attr-defined]

    text = cli(*args, "-q", str(path), "--skip-unreadable", "--exit-zero")
    assert text.exit_code == 1, text  # type: ignore[attr-defined]
    assert "SKIPPED (unreadable, not analysed): b: cannot read data" in text.stdout  # type: ignore[attr-defined]
    assert "SKIPPED (unreadable, not analysed): c: negative q -1.0" in text.stdout  # type: ignore[attr-defined]
    err = text.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(err) == 1 and err[0].startswith("rmsnorm-eps: INCOMPLETE:")
    assert err[0].endswith("skipped 2 unreadable layer(s): b, c")

    res = cli(*args, "-q", str(path), "--skip-unreadable", "--format", "json")
    assert res.exit_code == 1  # type: ignore[attr-defined]
    doc = json.loads(res.stdout)  # type: ignore[attr-defined]
    assert [s["name"] for s in doc["skipped"]] == ["b", "c"]
    assert doc["skipped"][1]["problem"].startswith("negative q -1.0")
    if command == "ratio":
        jsonschema.validate(doc, load_schema("ratio"))


def test_clean_dump_with_skip_flag_is_unchanged(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "ok.npz"
    path.write_bytes(zip_bytes([("a.npy", npy(_q_values()))]))
    res = cli("ratio", "--eps", "1e-5", "-q", str(path), "--skip-unreadable", "--format", "json")
    assert res.exit_code == 0  # type: ignore[attr-defined]
    assert "skipped" not in json.loads(res.stdout)  # type: ignore[attr-defined]


@pytest.mark.parametrize("threads", [1, 2])
def test_corrupt_stored_member_fails_with_any_thread_count(tmp_path: Path, threads: int) -> None:
    """The parallel reader reads stored members in place (not through zipfile): it checks the
    member's CRC-32 itself, so a flipped byte is an error there too, not a silent wrong q."""
    values = np.full(3_000_000, 1.0)
    good = bytearray(zip_bytes([("a.npy", npy(values))]))
    path = tmp_path / "ok.npz"
    path.write_bytes(bytes(good))
    report = analyze_dump(path, 1e-5, threads=threads, chunk_bytes=1 << 20)
    assert report.count == values.size and report.violations == 0
    good[len(good) // 2] ^= 0xFF
    path.write_bytes(bytes(good))
    with pytest.raises(InputFileError, match=r"\[a\]: cannot read data: Bad CRC-32"):
        analyze_dump(path, 1e-5, threads=threads, chunk_bytes=1 << 20)


# --------------------------------------------------------------------------- every format

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
REGEN = os.environ.get("RMSNORM_EPS_REGEN_GOLDEN", "") not in ("", "0")
EXT = {
    "text": "txt",
    "json": "json",
    "markdown": "md",
    "github": "github.txt",
    "junit": "junit.xml",
    "sarif": "sarif",
}
MIXED = "tests/data/skip/mixed.npz"  # made by tests/data/skip/make_skip.py
SKIP_CASES = {
    "ratio-skipped": ("ratio", "--eps", "1e-5", "--q-file", MIXED, "--skip-unreadable"),
    "compare-skipped": (
        "compare",
        "--from",
        "eps=1e-5",
        "--to",
        "eps=1e-6",
        "--q-file",
        MIXED,
        "--skip-unreadable",
    ),
}


def test_skip_data_is_what_its_script_makes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_skip", ROOT / "tests/data/skip/make_skip.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / MIXED).read_bytes() == module.mixed_bytes()


@pytest.mark.parametrize("fmt", sorted(EXT))
@pytest.mark.parametrize("case", sorted(SKIP_CASES))
def test_skipped_layers_in_every_format(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, case: str, fmt: str
) -> None:
    """Every format shows the skipped layers b and c (golden files; RMSNORM_EPS_REGEN_GOLDEN=1
    rewrites them); the run exits 1 even though the readable layer is clean."""
    monkeypatch.chdir(ROOT)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    res = cli(*SKIP_CASES[case], "--format", fmt)
    assert res.exit_code == 1, res  # type: ignore[attr-defined]
    out = res.stdout  # type: ignore[attr-defined]
    assert "Bad CRC-32 for file 'b.npy'" in out and "negative q -1.0" in out
    path = GOLDEN / f"{case}.{EXT[fmt]}"
    if REGEN:
        path.write_text(out, encoding="utf-8")
    assert path.is_file(), f"missing {path}; run with RMSNORM_EPS_REGEN_GOLDEN=1"
    assert out == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["ratio", "compare"])
def test_ci_formats_fail_each_skipped_layer(cli: Cli, command: str) -> None:
    """One failing ``<command>/unreadable`` check per skipped layer, level error, in the
    check model every CI format renders; and a failed verdict although nothing violates."""
    from rmsnorm_eps.reports import check_report

    if command == "ratio":
        report: object = analyze_dump(ROOT / MIXED, 1e-5, skip_unreadable=True)
    else:
        report = compare_dump(
            ROOT / MIXED,
            parse_spec("eps=1e-5", "--from"),
            parse_spec("eps=1e-6", "--to"),
            skip_unreadable=True,
        )
    checks = check_report(report)
    bad = [(c.rule, c.name, c.level, c.passed) for c in checks.failed]
    rule = f"{command}/unreadable"
    assert bad == [(rule, "b", "error", False), (rule, "c", "error", False)]
    assert not checks.passed and checks.verdict.startswith("incomplete: 2 unreadable layer(s)")
    assert checks.rule(rule).level == "error"
    assert ("skipped", "2 unreadable layer(s): b, c") in checks.facts


@pytest.mark.parametrize("command", ["ratio", "compare"])
def test_skipped_report_matches_the_json_schema(cli: Cli, command: str) -> None:
    args = SKIP_CASES[f"{command}-skipped"]
    res = cli(*(a if a != MIXED else str(ROOT / MIXED) for a in args), "--format", "json")
    assert res.exit_code == 1  # type: ignore[attr-defined]
    doc = json.loads(res.stdout)  # type: ignore[attr-defined]
    assert [s["name"] for s in doc["skipped"]] == ["b", "c"]
    jsonschema.validate(doc, load_schema(command))
    del doc["skipped"][0]["problem"]  # control: the schema does check the entries
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, load_schema(command))
