"""Readings that would answer a different question (issue 23, item 1): a ``--dtype`` that
applies to no layer is an error; a q array shaped like activations without ``--raw`` and a 1-D
array with ``--raw`` get one warning line each (``--strict``: exit 2); the library returns the
warnings (rmsnorm_eps.sources.intent) and never prints them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.intent import WIDTH_STEP, shape_warnings
from rmsnorm_eps.sources.interface import open_sources
from tests.conftest import Result

EPS = ("--eps", "1e-5")
_RNG = np.random.default_rng(23)
#: Activations of 8 tokens of width 128 (a multiple of 64: a model width).
X = (_RNG.standard_normal((8, 128)) * 0.05).astype(np.float32)
Q = np.mean(np.square(X.astype(np.float64)), axis=-1).astype(np.float32)


def _warnings(res: Result) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.startswith("rmsnorm-eps: warning:")]


# ------------------------------------------------------------------------------ --dtype


def test_dtype_on_a_float_npy_is_an_error_naming_file_dtype_and_flag(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    np.save(tmp_path / "q.npy", Q)
    for cmd in (("ratio", *EPS), ("compare", "--from", "eps=1e-5", "--to", "eps=1e-6")):
        res = cli(*cmd, str(tmp_path / "q.npy"), "--dtype", "bf16")
        assert res.exit_code == 2, res
        (err,) = res.stderr.splitlines()
        assert err.startswith("rmsnorm-eps: error: ") and "q.npy" in err, err
        assert "float32" in err and "--dtype bfloat16 does not apply" in err, err
        assert "Traceback" not in res.stderr


def test_dtype_on_float_npz_names_the_member_and_csv_is_refused(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    np.savez(tmp_path / "q.npz", **{"model.norm": Q.astype(np.float64), "second": Q})
    res = cli("ratio", *EPS, str(tmp_path / "q.npz"), "--dtype", "bfloat16")
    assert res.exit_code == 2
    assert "q.npz [model.norm]: --dtype bfloat16 does not apply to float64 data (nor to any" in (
        res.stderr
    )
    (tmp_path / "q.csv").write_text("a\n0.5\n1.5\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"does not apply to float64 data"):
        analyze_dump(tmp_path / "q.csv", 1e-5, dtype="bfloat16")


def test_dtype_still_reads_bit_patterns_and_mixed_dumps(tmp_path: Path) -> None:
    bits = (Q.view(np.uint32) >> 16).astype(np.uint16)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    np.savez(tmp_path / "mixed.npz", bits=bits, floats=Q)
    rep = analyze_dump(tmp_path / "mixed.npz", 1e-5, dtype="bfloat16")
    by_name = {ly.name: ly for ly in rep.layers}
    assert by_name["bits"].dtype == "bfloat16" and by_name["floats"].dtype == "float32"
    assert by_name["bits"].min_q == float(want.min())
    # a natively bfloat16 member agrees with the option: not an error
    opened = open_sources(tmp_path / "mixed.npz", "bfloat16")
    assert [s.stored_as for s in opened.sources] == ["bfloat16", None]


# ------------------------------------------------------------------------------ shapes


def test_shape_rule_fires_on_activation_widths_only(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "d.npz",
        sq=np.square(X),  # (8, 128): x**2 per element
        flat=Q,  # (8,): q per token, as capture writes it
        bt=np.tile(Q, (3, 1))[:, :5],  # (batch, tokens) = (3, 5)
        odd=np.square(X)[:, :100],  # last axis 100: not a multiple of 64
    )
    sources = open_sources(tmp_path / "d.npz").sources
    assert [w.key for w in shape_warnings(sources, raw=False)] == ["sq"]
    assert [w.key for w in shape_warnings(sources, raw=True)] == ["flat"]
    assert 128 % WIDTH_STEP == 0 and 100 % WIDTH_STEP != 0


def test_capture_dump_shapes_get_no_warning(tmp_path: Path) -> None:
    """What ``capture`` writes (rmsnorm_eps.capture.output): q of shape (N,) with int64
    companions of the same shape."""
    n = Q.size
    np.savez(
        tmp_path / "cap.npz",
        **{
            "model.norm": Q,
            "model.norm::position": np.arange(n, dtype=np.int64),
            "model.norm::batch": np.zeros(n, dtype=np.int64),
        },
    )
    rep = analyze_dump(tmp_path / "cap.npz", 1e-5)
    assert rep.warnings == ()


def test_library_returns_warnings_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "sq.npy", np.square(X))
    rep = analyze_dump(tmp_path / "sq.npy", 1e-5)
    (w,) = rep.warnings
    assert w.key is None and w.path.endswith("sq.npy")
    assert "looks like x**2 per element" in w.message and "(8, 128)" in w.message
    assert rep.count == X.size  # the analysis still ran on every element
    np.save(tmp_path / "q.npy", Q)
    cmp = compare_dump(tmp_path / "q.npy", "eps=1e-5", "eps=1e-6", raw=True)
    (w,) = cmp.warnings
    assert "one vector of 8 elements" in w.message
    assert capsys.readouterr() == ("", "")


def test_cli_warns_once_per_layer_and_strict_exits_2(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    np.save(tmp_path / "sq.npy", np.square(X))
    res = cli("ratio", *EPS, str(tmp_path / "sq.npy"))
    assert res.exit_code in (0, 1), res
    (w,) = _warnings(res)
    assert "sq.npy: shape (8, 128) looks like x**2 per element" in w
    assert "did you forget the mean? use --raw for activations" in w
    res = cli("ratio", *EPS, str(tmp_path / "sq.npy"), "--strict", "-f", "json")
    assert res.exit_code == 2 and res.stdout == "", res
    (err,) = res.stderr.splitlines()
    assert err.startswith("rmsnorm-eps: error: ") and err.endswith("(--strict)"), err

    np.save(tmp_path / "q.npy", Q)
    for cmd in (("ratio", *EPS), ("compare", "--from", "eps=1e-5", "--to", "eps=1e-6")):
        res = cli(*cmd, str(tmp_path / "q.npy"), "--raw")
        assert res.exit_code in (0, 1), res
        (w,) = _warnings(res)
        assert "--raw on a 1-D array treats it as one vector of 8 elements" in w
        res = cli(*cmd, str(tmp_path / "q.npy"), "--raw", "--strict")
        assert res.exit_code == 2 and "one vector of 8 elements" in res.stderr
        clean = cli(*cmd, str(tmp_path / "q.npy"), "--strict")
        assert clean.exit_code in (0, 1) and _warnings(clean) == [], clean


def test_warning_escapes_hostile_member_names(cli: Callable[..., Result], tmp_path: Path) -> None:
    name = "evil\x1b[31m\nname\u202e"
    np.savez(tmp_path / "h.npz", **{name: np.square(X)})
    res = cli("ratio", *EPS, str(tmp_path / "h.npz"))
    (w,) = _warnings(res)
    assert "\x1b" not in res.stderr and "\u202e" not in res.stderr
    assert "evil\\x1b[31m\\x0aname\\u202e" in w, w
    res = cli("ratio", *EPS, str(tmp_path / "h.npz"), "--strict")
    assert res.exit_code == 2 and "\x1b" not in res.stderr
    assert len(res.stderr.splitlines()) == 1
