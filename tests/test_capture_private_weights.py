"""capture/sensitivity load a ``.safetensors`` checkpoint from private in-memory copies
(capture/loading.py ``private_checkpoint``), never from a memory map of the files: a checkpoint
truncated by another process during the load died of SIGBUS with nothing on stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = Path(__file__).resolve().parents[1]

#: The CLI in this process, with transformers' ``safe_open`` truncating the model's weight
#: file right after opening it: a map of the file itself dies of SIGBUS (exit -7) there.
_TRUNCATE_AT_OPEN = """
import os, runpy, sys
import transformers.modeling_utils as mu
target = sys.argv[1]
real = mu.safe_open
def opened_then_truncated(*args, **kw):
    handle = real(*args, **kw)
    os.truncate(target, 0)
    return handle
mu.safe_open = opened_then_truncated
sys.argv = ["rmsnorm_eps", *sys.argv[2:]]
runpy.run_module("rmsnorm_eps", run_name="__main__")
"""

#: The same with ``torch.load`` (which transformers maps a ``.bin`` checkpoint with).
_TRUNCATE_AFTER_TORCH_LOAD = _TRUNCATE_AT_OPEN.replace(
    "import transformers.modeling_utils as mu", "import torch as mu"
).replace("mu.safe_open", "mu.load")

#: The CLI in this process, with every positioned read of the weight file truncating it first
#: (the copy for loading is read so).
_TRUNCATE_WHILE_COPIED = """
import os, runpy, sys
target = os.path.realpath(sys.argv[1])
real = os.pread
def truncated_then_read(fd, n, offset):
    if os.path.realpath(f"/proc/self/fd/{fd}") == target:
        os.truncate(target, 0)
    return real(fd, n, offset)
os.pread = truncated_then_read
sys.argv = ["rmsnorm_eps", *sys.argv[2:]]
runpy.run_module("rmsnorm_eps", run_name="__main__")
"""


def _run(script: str, weights: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", script, str(weights), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )


def _capture_args(d: Path, out: Path) -> list[str]:
    return ["capture", "--model", str(d), "--text", "the quick fox", "--save-data", str(out)]


@pytest.fixture
def model_copy(model_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "model"
    shutil.copytree(model_dir, d)
    return d


def _sharded(d: Path) -> Path:
    """``d`` saved again as 6 shards and their index (``model.safetensors`` removed)."""
    from tests.helpers import tiny_llama

    (d / "model.safetensors").unlink()
    tiny_llama().save_pretrained(d, max_shard_size="20KB")  # type: ignore[attr-defined]
    assert (d / "model.safetensors.index.json").is_file()
    return d / "model-00002-of-00006.safetensors"


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd only")
@pytest.mark.parametrize("sharded", [False, True], ids=["one-file", "sharded"])
def test_weights_truncated_after_they_were_opened_are_read_from_the_private_copy(
    model_copy: Path, tmp_path: Path, sharded: bool
) -> None:
    weights = _sharded(model_copy) if sharded else model_copy / "model.safetensors"
    out = _run(_TRUNCATE_AT_OPEN, weights, *_capture_args(model_copy, tmp_path / "q.npz"))
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # SIGBUS death: -7
    assert weights.stat().st_size == 0  # truncated during the load, yet the model loaded
    assert (tmp_path / "q.npz").is_file()


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd only")
def test_weights_truncated_while_copied_are_one_error_line(
    model_copy: Path, tmp_path: Path
) -> None:
    weights = model_copy / "model.safetensors"
    size = weights.stat().st_size
    out = _run(_TRUNCATE_WHILE_COPIED, weights, *_capture_args(model_copy, tmp_path / "q.npz"))
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    line = out.stderr.strip()
    assert line == (
        f"rmsnorm-eps: error: {weights}: file changed while being read: it had {size} bytes "
        "when opened, 0 when copied for loading (was it rewritten or truncated by another process?)"
    )
    assert not (tmp_path / "q.npz").exists()


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd only")
def test_copies_whose_headers_differ_from_those_checked_are_refused(model_copy: Path) -> None:
    """The sizes were capped against the headers read first; copies that hold other tensors
    (the file rewritten in between) are the one line, not a load of unchecked sizes."""
    from dataclasses import replace

    from rmsnorm_eps.capture.checkpoint import weights_present
    from rmsnorm_eps.capture.loading import private_checkpoint
    from rmsnorm_eps.errors import InputFileError

    present = weights_present(model_copy)
    assert present is not None
    with private_checkpoint(model_copy, present) as private:
        assert private != model_copy
        assert sorted(p.name for p in private.iterdir()) == [
            "config.json", "generation_config.json", "model.safetensors",
        ]  # fmt: skip
        assert os.readlink(private / "model.safetensors").startswith("/proc/self/fd/")
    assert not private.exists()
    other = replace(present, tensors=present.tensors - 1)
    with pytest.raises(InputFileError) as err, private_checkpoint(model_copy, other):
        pass
    assert str(err.value).startswith(f"{model_copy}: file changed while being read: the ")
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd only")
def test_a_bin_checkpoint_truncated_after_torch_load_is_read_from_the_private_copy(
    model_copy: Path, tmp_path: Path
) -> None:
    import torch

    st = model_copy / "model.safetensors"
    weights = model_copy / "pytorch_model.bin"
    torch.save(safetensors_torch.load_file(str(st)), weights)  # a zip file: mapped by torch
    st.unlink()
    args = _capture_args(model_copy, tmp_path / "q.npz")
    out = _run(_TRUNCATE_AFTER_TORCH_LOAD, weights, *args)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # SIGBUS death: -7
    assert weights.stat().st_size == 0 and (tmp_path / "q.npz").is_file()
