"""compare CLI: exit codes, budgets, --exit-zero, json, --output, errors; the docs' figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.compare_fixture import write_q_dump


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    return write_q_dump(tmp_path / "q_dump.npz")


def test_eps_1e6_to_1e5_lists_moved_inputs(cli, dump: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("compare", "--q-file", str(dump), "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert r.exit_code == 1, r
    out = r.stdout
    assert "layers.0.input_layernorm: largest |change| (5 input(s))" in out
    # exactly two inputs move by more than 1%: q = 8e-5 ([1, 1]) and q = 3e-4 ([0, 0])
    assert " [1, 1]    8e-05           80   0.948683     -0.0513167\n" in out
    assert " [0, 0]   0.0003          300   0.985377      -0.014623\n" in out
    assert " [1, 2]   0.0006          600   0.992596    -0.00740446\n" in out
    assert " [1e1, 1e2)       1       1      0.0513167\n" in out
    assert " [1e2, 1e3)       2       1       0.014623\n" in out
    assert " layers.0.input_layernorm       8           0      0.0513167     0.948683 " in out
    assert (
        "FAIL: 2 violation(s) (2 moved by more than 0.01, 0 nonfinite) in 1 of 3 layer(s), "
        "24 inputs; max |change| 0.0513167" in r.stderr
    )


def test_json_and_output(cli, dump: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.json"
    r = cli(
        "compare",
        "-q",
        str(dump),
        "--from",
        "eps=1e-6",
        "--to",
        "eps=1e-5",
        "--format",
        "json",
        "-o",
        str(out),
    )
    assert r.exit_code == 1 and r.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["command"] == "compare" and doc["schema_version"] == 2
    assert doc["summary"]["moved"] == 2 and doc["gate"]["passed"] is False
    layer = doc["layers"][0]
    assert [w["index"] for w in layer["worst"][:2]] == [[1, 1], [0, 0]]
    assert layer["worst"][0]["factor"] == pytest.approx(0.9486832980505138, rel=1e-7)
    assert doc["from"]["eps"] == 1e-6 and doc["to"]["placement"] == "inside"


def test_budgets_and_exit_zero(cli, dump: Path) -> None:  # type: ignore[no-untyped-def]
    base = ("compare", "-q", str(dump), "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert cli(*base, "--max-violations", "2").exit_code == 0
    assert cli(*base, "--max-violations", "1").exit_code == 1
    assert cli(*base, "--max-fraction", str(2 / 24)).exit_code == 0
    assert cli(*base, "--max-fraction", "0.08").exit_code == 1
    r = cli(*base, "--exit-zero")
    assert r.exit_code == 0 and "FAIL" in r.stderr
    assert cli(*base, "--tolerance", "0.06").exit_code == 0


def test_torch_default_resolves(cli, dump: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "compare",
        "-q",
        str(dump),
        "--from",
        "eps=1e-5",
        "--to",
        "framework=torch,dtype=bfloat16",
        "--top",
        "3",
    )
    assert r.exit_code == 1
    assert "to:   eps=1.1920929e-07 inside float32 (torch default bfloat16 input)" in r.stdout
    assert (
        "to default: torch.nn.RMSNorm / torch.nn.functional.rms_norm: current torch (>= 2.7): "
        "finfo(float32).eps, the compute type of bfloat16 inputs; q + eps formed in float32"
    ) in r.stdout.replace("\n", " ")
    assert " [1, 1]    8e-05            8   1.05987    +0.0598709\n" in r.stdout
    assert " [0, 0]   0.0003           30   1.01633    +0.0163281\n" in r.stdout


def test_placement_and_scale(cli, dump: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "compare",
        "-q",
        str(dump),
        "--from",
        "eps=1e-5",
        "--to",
        "eps=1e-5",
        "--scale",
        "0.1",
        "--format",
        "json",
    )
    doc = json.loads(r.stdout)
    s = cli(
        "compare", "-q", str(dump), "--from", "eps=1e-5", "--to", "eps=1e-3", "--format", "json"
    )
    same = json.loads(s.stdout)
    assert doc["summary"]["moved"] == same["summary"]["moved"] == 6
    assert doc["summary"]["max_abs_change"] == pytest.approx(0.711325, abs=5e-7)
    assert doc["summary"]["max_abs_change"] == pytest.approx(
        same["summary"]["max_abs_change"], rel=1e-12
    )
    o = cli("compare", "-q", str(dump), "--from", "eps=1e-5", "--to", "eps=1e-5,placement=outside")
    # q = 8e-5: sqrt(q + eps) / (sqrt(q) + eps) = 0.0094868 / 0.0089543
    assert o.exit_code == 1 and "max |change| 0.0594756" in o.stderr
    q = np.float64(np.float32(8e-5))
    assert np.sqrt(q + 1e-5) / (np.sqrt(q) + 1e-5) - 1 == pytest.approx(0.0594756, abs=5e-8)


def test_nonfinite_and_zero_eps(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "q.npy"
    np.save(path, np.array([0.0, 1.0, np.nan]))
    r = cli("compare", "-q", str(path), "--from", "eps=1e-8", "--to", "eps=1e-8,dtype=float16")
    assert r.exit_code == 1
    assert "1 nonfinite q (1 NaN, 0 inf) and 1 nonfinite factor(s)" in r.stdout


def test_an_eps_stored_as_0_is_said_and_zero_rows_are_counted_once(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path
) -> None:
    """1e-8 is 0 in float16: the text and JSON say so, and the two zero rows (output 0/0 =
    NaN) are nonfinite violations, no longer also 'zero vector(s) ... not counted'."""
    path = tmp_path / "q.npy"
    np.save(path, np.array([0.0, 0.0, 1e-3, 1.0]))
    args = ("compare", str(path), "--from", "eps=1e-5", "--to", "eps=1e-8,dtype=float16")
    r = cli(*args)
    assert r.exit_code == 1
    assert "to:   eps=1e-08 (0 in float16) inside float16" in r.stdout
    assert "to note: eps=1e-08 is 0 in float16" in r.stdout
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("rmsnorm-eps: FAIL: 2 violation(s) (0 moved by more than 0.01, 2 nonf")
    assert "not counted" not in line and "zero vector" not in line
    doc = json.loads(cli(*args, "-f", "json").stdout)
    assert doc["to"]["note"].startswith("eps=1e-08 is 0 in float16")
    s = doc["summary"]
    assert (s["zero"], s["nonfinite"], s["violations"]) == (0, 2, 2)
    assert s["within_safe_eps"] is True and s["safe_eps_margin_decades"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "config", "--to", "eps=1e-5"), "--from config needs --config FILE"),
        (("--from", "eps=1e-6", "--to", "framework=transformers"), "pick one: hf-llama"),
        (("--from", "eps=1e-6", "--to", "framework=jax"), "unknown framework 'jax'"),
        (("--from", "eps=1e-6", "--to", "framework=torch"), "add dtype="),
        (
            ("--from", "eps=1e-6", "--to", "framework=llama.cpp"),
            "llama.cpp: no default: eps is read from the GGUF",
        ),
        (("--from", "eps=1e-6", "--to", "eps=-1"), "eps must be finite and > 0"),
        (("--from", "eps=1e-6", "--to", "eps=1e-5", "--scale", "0"), "scale must be finite"),
        (("--from", "eps=1e-6", "--to", "eps=1e-5", "--format", "xml"), "'xml' is not one of"),
    ],
)
def test_errors_exit_2(cli, dump: Path, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("compare", "-q", str(dump), *args)
    assert r.exit_code == 2 and message in r.stderr, r


def test_missing_file_and_missing_options(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("compare", "-q", str(tmp_path / "nope.npz"), "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert r.exit_code == 2 and "nope.npz: no such file" in r.stderr
    r = cli("compare", "-q", str(tmp_path / "nope.npz"), "--from", "eps=1e-6")
    assert r.exit_code == 2 and "--to" in r.stderr
    np.save(tmp_path / "neg.npy", np.array([-1.0]))
    r = cli("compare", "-q", str(tmp_path / "neg.npy"), "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert r.exit_code == 2 and "negative q" in r.stderr
