"""Property-based fuzzing of every reader on mutated valid files.

Each reader's library entry point is fed a valid file mutated by bit flips, truncations, byte
overwrites and insertions, large integers written over header fields, and (for the formats
with a text header) edits of that header. The property: nothing but a
:class:`rmsnorm_eps.errors.RmsnormEpsError` escapes, whatever the bytes are.

Examples per reader: 2,000 by default (CI), more with RMSNORM_EPS_FUZZ_EXAMPLES=N. CI runs are
derandomized (the same examples every run); set RMSNORM_EPS_FUZZ_RANDOM=1 to explore.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.config import load_config
from rmsnorm_eps.dumps import npy_bytes
from tests.fuzz_helpers import FUZZ, FUZZ_EXAMPLES, FUZZ_WORK, fuzz_check, mutations

#: A RuntimeWarning from numpy would be a second stderr line on the command line: an error here.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::RuntimeWarning")]

# --------------------------------------------------------------------------- valid seeds


def _npz(members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _q(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) + 0.5).astype(dtype)


NPY_SEEDS = [
    npy_bytes(_q((3, 4), "<f4")),
    npy_bytes(np.asfortranarray(_q((4, 3), ">f8"))),
    npy_bytes(_q((5,), "<f2")),
]
_POS = np.array([[0, 1, 2], [0, 1, 2]], np.int64)
NPZ_MEMBERS = {
    "layers.0.norm.npy": npy_bytes(_q((2, 3), "<f4")),
    "layers.0.norm::position.npy": npy_bytes(_POS),
    "final.npy": npy_bytes(_q((4, 2), "<f8")),
}
NPZ_SEEDS = [_npz(NPZ_MEMBERS), _npz(NPZ_MEMBERS, zipfile.ZIP_DEFLATED)]

YAML_SEED = b"""schema_version: 1
model: tiny
defaults: {eps: 1e-5, placement: inside, gain: w, dim: 8, norm: rms}
layers:
  "*.input_layernorm": {}
  "*.q_norm": {eps: 1e-6, dim: 4}
"""
JSON_SEED = (
    b'{"model_type": "qwen3", "rms_norm_eps": 1e-06, "hidden_size": 64, '
    b'"num_attention_heads": 4, "head_dim": 16, "text_config": {"rms_norm_eps": 1e-06}}'
)


def _gguf_seed() -> bytes:
    gguf = pytest.importorskip("gguf")
    path = FUZZ_WORK / "seed.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name("fuzz")
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32("qwen3.embedding_length", 8)
    w.add_array("tokenizer.ggml.tokens", ["a", "bc", "def"])
    w.add_array("tokenizer.ggml.scores", [0.5, 1.5, 2.5])
    w.add_tensor("blk.0.attn_q_norm.weight", np.ones(4, np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


# --------------------------------------------------------------------------- mutations


def _read_dump(path: Path) -> None:
    analyze_dump(path, 1e-5, chunk_bytes=64)
    analyze_dump(path, 1e-5, raw=True, chunk_bytes=64)


# --------------------------------------------------------------------------- the properties


def test_seeds_are_valid() -> None:
    """Every seed reads cleanly: the mutations start from files the readers accept."""
    for i, seed in enumerate(NPY_SEEDS):
        (FUZZ_WORK / f"seed{i}.npy").write_bytes(seed)
        assert analyze_dump(FUZZ_WORK / f"seed{i}.npy", 1e-5).count > 0
    for i, seed in enumerate(NPZ_SEEDS):
        (FUZZ_WORK / f"seed{i}.npz").write_bytes(seed)
        report = analyze_dump(FUZZ_WORK / f"seed{i}.npz", 1e-5)
        assert [layer.name for layer in report.layers] == ["layers.0.norm", "final"]
        assert report.layers[0].first_token is not None
    (FUZZ_WORK / "seed.yaml").write_bytes(YAML_SEED)
    assert load_config(FUZZ_WORK / "seed.yaml").defaults.eps.value == 1e-5
    (FUZZ_WORK / "seed.json").write_bytes(JSON_SEED)
    assert load_config(FUZZ_WORK / "seed.json").defaults.eps.value == 1e-6
    cfg = load_config(FUZZ_WORK / "seed.gguf") if (FUZZ_WORK / "seed.gguf").exists() else None
    if cfg is None:
        (FUZZ_WORK / "seed.gguf").write_bytes(_gguf_seed())
        cfg = load_config(FUZZ_WORK / "seed.gguf")
    assert cfg.defaults.eps.value == pytest.approx(1e-6, rel=1e-7)
    q = cfg.settings_for("model.layers.0.self_attn.q_norm")
    assert q is not None and q.dim.value == 4


@FUZZ
@given(data=st.sampled_from(NPY_SEEDS).flatmap(mutations))
def test_fuzz_npy(data: bytes) -> None:
    fuzz_check(_read_dump, data, "f.npy")


@FUZZ
@given(data=st.sampled_from(NPZ_SEEDS).flatmap(mutations))
def test_fuzz_npz_archive(data: bytes) -> None:
    """Mutations of the zip bytes (most are caught by the CRC or the zip structure)."""
    fuzz_check(_read_dump, data, "f.npz")


@FUZZ
@given(
    member=st.sampled_from(sorted(NPZ_MEMBERS)),
    data=st.data(),
    compress=st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
)
def test_fuzz_npz_member(member: str, data: st.DataObject, compress: int) -> None:
    """Mutations of one member's .npy bytes, repacked with a valid CRC: reaches the parsers."""
    members = dict(NPZ_MEMBERS)
    members[member] = data.draw(mutations(members[member]))
    fuzz_check(_read_dump, _npz(members, compress), "m.npz")


@FUZZ
@given(data=mutations(YAML_SEED))
def test_fuzz_yaml(data: bytes) -> None:
    fuzz_check(load_config, data, "f.yaml")


@FUZZ
@given(data=mutations(JSON_SEED))
def test_fuzz_hf_json(data: bytes) -> None:
    fuzz_check(load_config, data, "config.json")


@FUZZ
@given(data=st.data())
def test_fuzz_gguf(data: st.DataObject) -> None:
    fuzz_check(load_config, data.draw(mutations(_gguf_seed_cached())), "f.gguf")


_GGUF: list[bytes] = []


def _gguf_seed_cached() -> bytes:
    if not _GGUF:
        _GGUF.append(_gguf_seed())
    return _GGUF[0]


# ------------------------------------------------------------- safetensors, torch.save, CSV

#: The readers added with the common source interface: 300 examples each by default.
FUZZ_SHORT = settings(FUZZ, max_examples=min(FUZZ_EXAMPLES, 300))


def _safetensors_seed(code: str) -> bytes:
    import json
    import struct

    q = _q((3, 4), "<f4")
    data = q.tobytes() if code == "F32" else (q.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = {
        "__metadata__": {"format": "pt"},
        "layers.0.norm": {"dtype": code, "shape": [3, 4], "data_offsets": [0, len(data)]},
        "final": {"dtype": "F64", "shape": [2], "data_offsets": [len(data), len(data) + 16]},
    }
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data + _q((2,), "<f8").tobytes()


SAFETENSORS_SEEDS = [_safetensors_seed("F32"), _safetensors_seed("BF16")]
CSV_SEEDS = [b"a,b\n0.5,1.5\n2.5,nan\n3.5,inf\n", b"1.5\t2\n3e-2\t4\n"]


def _read_any(path: Path) -> None:
    """Every source through the analysis, raw and not, and with ``dtype="bfloat16"``."""
    _read_dump(path)
    analyze_dump(path, 1e-5, chunk_bytes=64, dtype="bfloat16", skip_unreadable=True)


_TORCH: list[bytes] = []


def _torch_seed() -> bytes:
    if not _TORCH:
        torch = pytest.importorskip("torch")
        buf = io.BytesIO()
        q = torch.from_numpy(_q((3, 4), "<f4"))
        torch.save({"layers": {"0": q, "1": q.to(torch.bfloat16)}, "final": [q[1:]]}, buf)
        _TORCH.append(buf.getvalue())
    return _TORCH[0]


def test_new_seeds_are_valid() -> None:
    for i, seed in enumerate(SAFETENSORS_SEEDS):
        (FUZZ_WORK / f"seed{i}.safetensors").write_bytes(seed)
        report = analyze_dump(FUZZ_WORK / f"seed{i}.safetensors", 1e-5)
        assert [layer.name for layer in report.layers] == ["layers.0.norm", "final"]
    for i, seed in enumerate(CSV_SEEDS):
        path = FUZZ_WORK / f"seed{i}.{'csv' if i == 0 else 'tsv'}"
        path.write_bytes(seed)
        assert len(analyze_dump(path, 1e-5).layers) == 2
    (FUZZ_WORK / "seed.pt").write_bytes(_torch_seed())
    report = analyze_dump(FUZZ_WORK / "seed.pt", 1e-5)
    assert [layer.name for layer in report.layers] == ["layers.0", "layers.1", "final.0"]


@FUZZ_SHORT
@given(data=st.sampled_from(SAFETENSORS_SEEDS).flatmap(mutations))
def test_fuzz_safetensors(data: bytes) -> None:
    fuzz_check(_read_any, data, "f.safetensors")


@FUZZ_SHORT
@given(data=st.data())
def test_fuzz_torchsave(data: st.DataObject) -> None:
    """Mutations of the whole archive (torch reads it; zipfile checks the directory)."""
    fuzz_check(_read_any, data.draw(mutations(_torch_seed())), "f.pt")


@FUZZ_SHORT
@given(data=st.data())
def test_fuzz_torchsave_pickle(data: st.DataObject) -> None:
    """Mutations of data.pkl alone, the archive rewritten around it: reaches the unpickler."""
    with zipfile.ZipFile(io.BytesIO(_torch_seed())) as zf:
        records = [(i.filename, zf.read(i)) for i in zf.infolist()]
    name, pkl = records[0]
    records[0] = (name, data.draw(mutations(pkl)))
    fuzz_check(_read_any, _npz(dict(records)), "p.pt")


@FUZZ_SHORT
@given(seed=st.sampled_from([0, 1]), data=st.data())
def test_fuzz_csv(seed: int, data: st.DataObject) -> None:
    fuzz_check(_read_any, data.draw(mutations(CSV_SEEDS[seed])), "f.csv" if seed == 0 else "f.tsv")
