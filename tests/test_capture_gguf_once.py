"""A GGUF model is parsed once per load (capture/loading.py ``gguf_parsed_once``), and what it
loads captures the same q as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import smollm2_dir

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "RMSNorm divides each vector by the root mean square of its elements.",
    "Hello",
]


def _tiny_gguf(path: Path, values: np.ndarray | None = None) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 2)
    embd = np.zeros((4, 8), np.float32) if values is None else values.reshape(4, 8)
    writer.add_tensor("token_embd.weight", embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_reader_per_file_inside_the_block_and_restored_after(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    from rmsnorm_eps.capture.loading import gguf_parsed_once

    a, b = _tiny_gguf(tmp_path / "a.gguf"), _tiny_gguf(tmp_path / "b.gguf")
    original, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_parsed_once() as parses:
        first = gguf.GGUFReader(str(a))
        assert gguf.GGUFReader(a) is first  # a Path and a str of the same file
        assert gguf.GGUFReader(str(b)) is not first
        assert first.fields["llama.block_count"].parts[-1][0] == 2
        m = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is m
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not m
        assert m.get_name("model.layers.1.input_layernorm") == "blk.1.attn_norm"
    assert len(parses.readers) == 2 and len(parses.name_maps) == 2
    assert gguf.GGUFReader is original and gguf.get_tensor_name_map is name_map
    with pytest.raises(RuntimeError), gguf_parsed_once():  # put back on an error too
        raise RuntimeError
    assert gguf.GGUFReader is original and gguf.get_tensor_name_map is name_map
    assert gguf.GGUFReader(str(a)) is not gguf.GGUFReader(str(a))


@pytest.mark.slow
def test_smollm2_gguf_is_parsed_once_and_captures_the_same_q(monkeypatch: Any) -> None:
    """One ``GGUFReader`` for config, tokenizer and weights; the q captured equal the test's
    own float64 pre-hook on the same forward passes, and the smallest q/eps is the figure
    docs/capture.md shows from before the change (695.112, to the 3 digits CPU kernels
    keep)."""
    import gguf.gguf_reader as gguf_reader
    import torch

    from rmsnorm_eps.capture.hooks import QCapture
    from rmsnorm_eps.capture.loading import load_model, run_texts

    made: list[str] = []
    init = gguf_reader.GGUFReader.__init__

    def counting(self: Any, path: Any, *args: Any, **kw: Any) -> None:
        made.append(str(path))
        init(self, path, *args, **kw)

    monkeypatch.setattr(gguf_reader.GGUFReader, "__init__", counting)
    loaded = load_model(smollm2_dir(), GGUF)
    assert len(made) == 1 and made[0].startswith("<_io.BufferedRandom")  # its private copy
    assert loaded.load_seconds > 0

    name = "model.layers.0.input_layernorm"
    module = dict(loaded.model.named_modules())[name]
    own: list[np.ndarray] = []
    handle = module.register_forward_pre_hook(
        lambda m, a: own.append((a[0].detach().to(torch.float64) ** 2).mean(-1).numpy())
    )
    try:
        with QCapture(loaded.model) as cap:
            run_texts(loaded, TEXTS, batch_size=1)
    finally:
        handle.remove()
    rec = next(m for m in cap.result().modules if m.name == name)
    assert rec.q is not None and rec.position is not None and rec.batch is not None
    want = np.concatenate([q[0] for q in own])  # one text per pass: batch 0, every position
    got = rec.q[np.lexsort((rec.position, rec.batch))]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert got.size == 26
    assert float(got.min()) / float(rec.eps or 0) == pytest.approx(695.112, rel=2e-3)


def test_debug_prints_load_and_forward_times_apart(
    cli: Any, model_dir: Path, tmp_path: Path
) -> None:
    args = ["capture", "--model", str(model_dir), "--text", "the quick brown fox"]
    out = ["--save-data", str(tmp_path / "q.npz")]
    r = cli("--debug", *args, *out)
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "timing:" in ln)
    load, forward = (float(line.split(w)[1].split()[0]) for w in ("load ", "forward "))
    assert load > 0 and forward > 0
    assert "1 text(s) under the hooks" in line
    r = cli(*args, *out)  # without --debug: no timing line
    assert r.exit_code == 0 and "timing:" not in r.stderr


#: Open the reader inside the block, truncate the file, then read a tensor: a reader that maps
#: the file itself died of SIGBUS here (exit -7, nothing on stderr).
_TRUNCATE_AFTER_OPEN = """
import os, sys
import numpy as np
import gguf
from rmsnorm_eps.capture.loading import gguf_parsed_once
path = sys.argv[1]
with gguf_parsed_once():
    reader = gguf.GGUFReader(path)
    os.truncate(path, 0)
    print(float(np.asarray(reader.tensors[0].data).sum()))
"""


def test_a_gguf_truncated_while_loaded_is_read_from_a_private_copy(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    import subprocess
    import sys

    path = _tiny_gguf(tmp_path / "a.gguf", np.arange(32, dtype=np.float32))
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_AFTER_OPEN, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, (out.returncode, out.stderr)  # a SIGBUS death is -7
    assert out.stdout.strip() == "496.0"  # sum(range(32)), read after the file was emptied
    assert path.stat().st_size == 0


def test_a_gguf_truncated_while_copied_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    import os

    from rmsnorm_eps.capture.loading import gguf_parsed_once
    from rmsnorm_eps.errors import InputFileError

    path = _tiny_gguf(tmp_path / "a.gguf")
    real = os.pread

    def cut_then_read(fd: int, n: int, offset: int) -> bytes:
        os.truncate(path, 0)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", cut_then_read)
    with gguf_parsed_once(), pytest.raises(InputFileError) as err:
        gguf.GGUFReader(str(path))
    assert str(err.value).startswith(f"{path}: file changed while being read: it had ")
    assert "\n" not in str(err.value)
