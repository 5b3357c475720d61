"""Nothing destroyed: outputs never overwrite inputs or each other; Ctrl-C exits 130 cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
Cli = Callable[..., object]


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "q.npz"
    np.savez(path, a=np.array([1e-4, 1.0, 2.0]), b=np.array([3.0, 4.0]))
    return path


def _refused(res: object, *untouched: tuple[Path, bytes | None]) -> None:
    assert res.exit_code == 2, res  # type: ignore[attr-defined]
    err = res.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(err) == 1 and "refusing to overwrite" in err[0], err
    assert res.stdout == ""  # type: ignore[attr-defined]
    for path, before in untouched:
        if before is None:
            assert not path.exists(), path
        else:
            assert path.read_bytes() == before, path


def test_output_is_the_input(cli: Cli, dump: Path, tmp_path: Path, monkeypatch) -> None:
    before = dump.read_bytes()
    monkeypatch.chdir(tmp_path)
    # same file by another spelling, a symlink and a hard link
    (tmp_path / "link.npz").symlink_to(dump)
    os.link(dump, tmp_path / "hard.npz")
    for out in (
        str(dump),
        "./q.npz",
        "link.npz",
        "hard.npz",
        f"{tmp_path}/../{tmp_path.name}/q.npz",
    ):
        for option in (("-o", out), ("--report", f"json={out}"), ("--save-summary", out)):
            res = cli("ratio", "q.npz", "--eps", "1e-5", *option)
            _refused(res, (dump, before))
            assert "the dump" in res.stderr  # type: ignore[attr-defined]
    pytest.importorskip("matplotlib")  # --plot needs the [plot] extra (checked first)
    (tmp_path / "q.png").symlink_to(dump)  # a plot name that links to the input
    res = cli("compare", "q.npz", "--from", "eps=1e-5", "--to", "eps=1e-6", "--plot", "q.png")
    _refused(res, (dump, before))


def test_two_outputs_are_one_file(cli: Cli, dump: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    new = tmp_path / "r.json"
    for pair in (
        ("-o", "r.json", "--report", "json=./r.json"),
        ("--report", "json=r.json", "--report", "sarif=r.json"),
        ("-o", "r.json", "--save-summary", "sub/../r.json"),
    ):
        (tmp_path / "sub").mkdir(exist_ok=True)
        res = cli("ratio", "q.npz", "--eps", "1e-5", *pair)
        _refused(res, (new, None))
        assert "another output" in res.stderr  # type: ignore[attr-defined]
    old = tmp_path / "old.txt"
    old.write_text("keep", encoding="utf-8")
    summary = tmp_path / "summary.md"
    res = cli(
        "ratio",
        "q.npz",
        "--eps",
        "1e-5",
        "--summary",
        "-o",
        str(summary),
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    _refused(res, (summary, None))


def test_every_command_checks(cli: Cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    config = "configs/llama-3-8b.yaml"
    probes = tmp_path / "p.npz"
    assert cli("probe", "--dim", "8", "--eps", "1e-6", "--save-data", str(probes)).exit_code == 0  # type: ignore[attr-defined]
    merged = tmp_path / "s.json"
    merged.write_bytes((ROOT / "tests/data/merge/shard0.summary.json").read_bytes())
    cases = [
        (("config", "show", config, "-o", config), Path(config)),
        (("config", "diff", config, config, "-o", config), Path(config)),
        (("merge", str(merged), "-o", str(merged)), merged),
        (
            ("parity", "--probes", str(probes), "--actual", str(probes), "--record", str(probes)),
            probes,
        ),
        (
            ("probe", "--dim", "8", "--eps", "1e-6", "--save-data", str(probes), "-o", str(probes)),
            probes,
        ),
        (("ratio", "examples/ci/q_dump.npz", "-c", config, "-o", config), Path(config)),
    ]
    for args, victim in cases:
        before = victim.read_bytes()
        _refused(cli(*args), (victim, before))


def test_special_files_are_not_compared(cli: Cli, dump: Path) -> None:
    res = cli("ratio", str(dump), "--eps", "1e-5", "-o", "/dev/null", "--report", "json=/dev/null")
    assert res.exit_code == 1  # type: ignore[attr-defined]


#: The CLI in a child process whose reader, once it has handed over its first chunk of data,
#: creates the file $READY (the readiness signal), and once the data is all read, waits for the
#: signal instead of finishing: the test never races the run, however loaded the machine.
_WAITING_CLI = """
import os, sys, time
from rmsnorm_eps.sources.raw import RawArraySource
real = RawArraySource.iter_mapped
def iter_mapped(self, *args, **kwargs):
    for n, item in enumerate(real(self, *args, **kwargs)):
        yield item
        if n == 0:
            open(os.environ["READY"], "x").close()
    while True:
        time.sleep(0.01)
RawArraySource.iter_mapped = iter_mapped
from rmsnorm_eps.cli import main
sys.argv[0] = "rmsnorm-eps"
main()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    big = tmp_path / "big.npy"
    np.save(big, np.linspace(1.0, 2.0, 100_000))
    report = tmp_path / "report.txt"
    report.write_text("previous report\n", encoding="utf-8")
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(ROOT), READY=str(ready))
    args = ["ratio", str(big), "--eps", "1e-5", "--chunk-bytes", "4096", "--threads", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _WAITING_CLI, *args, "-o", str(report)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # as from a terminal: a shell's background job (nohup, `cmd &`) starts with SIGINT
        # ignored, and Python then never raises KeyboardInterrupt (the run hung in such a CI)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120  # a generous bound on start-up, not a measurement
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the child never started reading"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err == "rmsnorm-eps: interrupted\n" and out == ""
    assert report.read_text("utf-8") == "previous report\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
