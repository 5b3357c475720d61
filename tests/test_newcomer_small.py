"""The small things a new user meets (issue 23, items 6 and 7): the ``Members:`` line counts
layers and companions apart, ..."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import Result


def _capture_like(path: Path, layers: int, n: int = 6) -> Path:
    """A dump as ``rmsnorm-eps capture`` writes it: q of shape (N,) per layer, with its int64
    ``::position`` and ``::batch`` companions."""
    rng = np.random.default_rng(7)
    members: dict[str, np.ndarray] = {}
    for i in range(layers):
        name = f"model.layers.{i}.input_layernorm"
        members[name] = (rng.random(n) + 0.5).astype(np.float32)
        members[f"{name}::position"] = np.arange(n, dtype=np.int64)
        members[f"{name}::batch"] = np.zeros(n, dtype=np.int64)
    np.savez(path, **members)  # type: ignore[arg-type]
    return path


def test_members_line_counts_layers_and_companions_apart(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    dump = _capture_like(tmp_path / "cap.npz", 3)
    res = cli("ratio", str(dump), "--eps", "1e-6")
    assert res.exit_code == 0, res
    assert "Members: 3 layers (+6 companions) in the file, 3 analysed\n" in res.stdout
    res = cli("compare", str(dump), "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert "Members: 3 layers (+6 companions) in the file, 3 analysed\n" in res.stdout


def test_members_line_without_companions_is_unchanged(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    np.savez(tmp_path / "q.npz", a=np.ones(3), b=np.ones(4))
    res = cli("ratio", str(tmp_path / "q.npz"), "--eps", "1e-6")
    assert "Members: 2 in the file, 2 analysed\n" in res.stdout


def test_members_line_with_a_skipped_layer(cli: Callable[..., Result], tmp_path: Path) -> None:
    dump = _capture_like(tmp_path / "cap.npz", 2)
    with np.load(dump) as z:
        members = {k: z[k] for k in z.files}
    members["model.layers.0.input_layernorm"] = np.ones(6, dtype=np.int8)  # unreadable
    np.savez(dump, **members)  # type: ignore[arg-type]
    res = cli("ratio", str(dump), "--eps", "1e-6", "--skip-unreadable")
    assert res.exit_code == 1, res
    assert "Members: 2 layers (+4 companions) in the file, 1 analysed\n" in res.stdout


def test_output_equal_to_the_input_is_one_clear_line(
    cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "q.npy", np.ones(4))
    data = (tmp_path / "q.npy").read_bytes()
    res = cli("ratio", "q.npy", "--eps", "1e-6", "-o", "./q.npy")
    assert res.exit_code == 2
    assert res.stderr == (
        "rmsnorm-eps: error: -o/--output q.npy is the same file as input q.npy (the dump): "
        "refusing to overwrite an input (give the output its own path)\n"
    )
    assert (tmp_path / "q.npy").read_bytes() == data


def test_force_color_colours_a_pipe_and_no_color_wins(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    """https://force-color.org: FORCE_COLOR set and not empty adds colour off a terminal (a
    CI log); https://no-color.org: NO_COLOR set and not empty wins; never in an -o file."""
    np.save(tmp_path / "q.npy", np.array([1e-9, 1.0, 2.0]))
    args = ("ratio", str(tmp_path / "q.npy"), "--eps", "1e-6")
    forced = cli(*args, env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert forced.exit_code == 1 and "\x1b[" in forced.stdout, forced
    plain = cli(*args, env={"NO_COLOR": ""})
    assert "\x1b[" not in plain.stdout
    # the same report, colour aside
    assert re.sub(r"\x1b\[[0-9;]*m", "", forced.stdout) == plain.stdout
    for env in ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, {"FORCE_COLOR": "", "NO_COLOR": ""}):
        assert "\x1b[" not in cli(*args, env=env).stdout, env
    res = cli(*args, "-o", str(tmp_path / "r.txt"), env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert res.exit_code == 1 and "\x1b[" not in (tmp_path / "r.txt").read_text()


def test_docs_use_save_data_not_the_deprecated_out() -> None:
    """``--out`` is the deprecated spelling of ``--save-data``: no example uses it (only
    docs/cli.md says it is deprecated)."""
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found = [
        f"{page.name}:{n}"
        for page in pages
        for n, text in enumerate(page.read_text("utf-8").splitlines(), 1)
        if re.search(r"--out(?=[ =`])", text) and "deprecated" not in text
    ]
    assert found == []


def test_defaults_table_fits_80_columns_off_a_terminal(cli: Callable[..., Result]) -> None:
    from rmsnorm_eps.config.defaults import FRAMEWORK_DEFAULTS

    res = cli("defaults")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, max(lines, key=len)
    assert lines[0] == "torch: torch.nn.RMSNorm / torch.nn.functional.rms_norm"
    heads = [x.split(":", 1)[0] for x in lines if x and not x.startswith(" ")]
    assert heads == [row.name for row in FRAMEWORK_DEFAULTS]
    one = cli("defaults", "--framework", "torch", "--dtype", "bf16").stdout.splitlines()
    assert one[0] == "1.1920929e-07" and max(len(x) for x in one) <= 80


def test_defaults_on_a_terminal_wraps_at_its_width_without_a_lone_header() -> None:
    from rmsnorm_eps.config.defaults import framework_defaults
    from rmsnorm_eps.reports import RenderOptions, render

    result = framework_defaults(None, None, None)
    for width in (100, 160):
        lines = render(result, "text", RenderOptions(width=width)).splitlines()
        assert lines[0].startswith("torch: ") and max(len(x) for x in lines) <= width
    # the JSON document is the table's rows, whatever the text layout
    res = render(result, "json", RenderOptions())
    assert '"name": "torch"' in res and '"rule (versions) [source]"' not in res


_TQDM_AFTER_MAIN = """
import sys
sys.argv = ["rmsnorm-eps", "--version"]
from rmsnorm_eps.cli import main
try:
    main()
except SystemExit:
    pass
import torch  # imports tqdm, as in capture: the bar's settings are read then
from tqdm.auto import tqdm
for _ in tqdm(range(3), desc="third-party-bar", mininterval=0):
    pass
"""


@pytest.mark.slow  # two interpreters importing torch: about 10 s
def test_third_party_progress_bars_only_on_a_terminal(tmp_path: Path) -> None:
    """capture's stderr to a file gets no tqdm bar (transformers' GGUF loader uses one): the
    CLI sets TQDM_DISABLE before torch imports tqdm. Checked on the real SmolLM2 GGUF by hand:
    its stderr is then the one summary line, no carriage return."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")
    pytest.importorskip("tqdm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    with open(tmp_path / "err.txt", "w", encoding="utf-8") as err:
        proc = subprocess.run(
            [sys.executable, "-c", _TQDM_AFTER_MAIN], stderr=err, env=env, timeout=120
        )
    assert proc.returncode == 0
    log = (tmp_path / "err.txt").read_text("utf-8")
    assert "third-party-bar" not in log and "\r" not in log, log
    # a user's own TQDM_DISABLE still decides
    env["TQDM_DISABLE"] = ""
    with open(tmp_path / "err2.txt", "w", encoding="utf-8") as err:
        subprocess.run([sys.executable, "-c", _TQDM_AFTER_MAIN], stderr=err, env=env, timeout=120)
    assert "third-party-bar" in (tmp_path / "err2.txt").read_text("utf-8")
