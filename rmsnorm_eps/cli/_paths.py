"""Nothing destroyed: an output may never be an input, nor another output of the same run, nor
lie inside a model folder that is read as input (:func:`check_outside_model`).

Files are compared by identity, not spelling: an existing regular file by ``(st_dev, st_ino)``
(so ``./q.npz``, ``q.npz``, a symlink or a hard link to it are all the same file); an output
that does not exist yet by its resolved real path (``os.path.realpath``), against the other
outputs. Special files (``/dev/stdout``, ``/dev/null``, FIFOs) are not compared: writing to
them never replaces a file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

__all__ = ["MODEL_FILE_SUFFIXES", "Named", "check_outputs", "check_outside_model"]

#: ``(label, path)``: how the user named the file (``-o/--output``, ``the dump``) and its path.
Named = tuple[str, Path | None]


def _identity(path: Path) -> tuple[object, ...] | None:
    """``(dev, ino)`` of an existing regular file, ``("new", realpath)`` of a missing path,
    None for special files (devices, FIFOs, directories: not compared)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ("new", os.path.realpath(path))
    except OSError:
        return None  # unreadable: the reader or the writer reports it
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino)


def _show(label: str, path: Path) -> str:
    """How a message names a file: after its option (``-o/--output r.json``, ``json=r.json``),
    or, for a positional argument (``the dump``), the path with what it is in parentheses
    (``q.npy (the dump)``)."""
    if label.endswith("="):
        return f"{label}{path}"
    return f"{label} {path}" if label.startswith("-") else f"{path} ({label})"


def check_outputs(inputs: Sequence[Named], outputs: Sequence[Named]) -> None:
    """Exit 2 with one line, before anything is written, when an output is the same file as an
    input or as another output. ``None`` paths (options not given) are ignored."""
    from rmsnorm_eps.cli._app import fail

    seen: dict[tuple[object, ...], str] = {}
    for label, path in inputs:
        if path is None:
            continue
        ident = _identity(Path(path))
        if ident is not None and ident[0] != "new":
            seen.setdefault(ident, f"input {_show(label, Path(path))}")
    for label, path in outputs:
        if path is None:
            continue
        ident = _identity(Path(path))
        if ident is None:
            continue
        other = seen.get(ident)
        if other is not None:
            what = "an input" if other.startswith("input ") else "another output"
            fail(
                f"{_show(label, Path(path))} is the same file as {other}: refusing to "
                f"overwrite {what} (give the output its own path)"
            )
        seen[ident] = f"output {_show(label, Path(path))}"


#: Suffixes of the files a model folder is loaded from (transformers' config, tokenizer,
#: weights, chat templates, remote code; llama.cpp's GGUF): an output with one of these names
#: inside the folder may be read as the model next time, even when no such file exists now.
MODEL_FILE_SUFFIXES = (
    ".json",
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".gguf",
    ".onnx",
    ".model",
    ".vocab",
    ".tiktoken",
    ".txt",
    ".jinja",
    ".py",
)


def check_outside_model(label: str, folder: Path | None, outputs: Sequence[Named]) -> None:
    """Exit 2 with one line, before anything is written, when an output resolves (symlinks
    followed: ``os.path.realpath``) into the model folder ``folder`` given as ``label``
    (``--model``), at any depth, with a name a model is loaded from
    (:data:`MODEL_FILE_SUFFIXES`: config.json, the tokenizer files, the weights, a chat
    template...), also one that does not exist yet: a new ``tokenizer.json`` beside a
    ``tokenizer.model`` changes the next load. (An existing file of the folder is an input,
    refused by :func:`check_outputs`.) ``None`` paths (options not given) are ignored."""
    from rmsnorm_eps.cli._app import fail

    if folder is None or not Path(folder).is_dir():
        return
    root = os.path.join(os.path.realpath(folder), "")
    for name, path in outputs:
        if path is None:
            continue
        real = os.path.realpath(path)
        if real.startswith(root) and real.lower().endswith(MODEL_FILE_SUFFIXES):
            fail(
                f"{_show(name, Path(path))} lies inside the model folder {label} {folder}: "
                "refusing to write a file a model is loaded from (give the output a path "
                "outside it)"
            )
