"""The texts a capture runs, and the batches it runs them in.

Sources (all offline, UTF-8):

* plain text: one text per non-empty line;
* JSON Lines (``.jsonl`` / ``.ndjson``, or any file when a field is named): one JSON object per
  non-empty line, the text in ``field`` (default ``"text"``);
* a local dataset file or directory read by the ``datasets`` library (extra ``[datasets]``):
  parquet, arrow, JSON Lines or CSV files, or a directory written by ``save_to_disk``; the hub
  is never contacted (``HF_DATASETS_OFFLINE=1``).

Batching: :func:`plan_batches` sorts the samples by token count (ties by sample index, so the
order is deterministic) and cuts the sorted list into batches, which keeps padding small; every
batch lists the sample indices it holds, so results map back to the samples.
:func:`shard_batches` gives each rank of a distributed job a contiguous run of those batches:
the ranks together run exactly the batches one process would, in the same order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.errors import InputFileError, MissingExtraError

__all__ = [
    "JSONL_SUFFIXES",
    "MAX_DATASET_BYTES",
    "MAX_TEXT_CHARS",
    "MAX_TEXT_TOKENS",
    "MAX_TOTAL_CHARS",
    "Batch",
    "check_texts",
    "plan_batches",
    "read_dataset",
    "read_text_file",
    "run_batches",
    "shard_batches",
    "tokenize",
]

JSONL_SUFFIXES = (".jsonl", ".ndjson")
_DATASET_BUILDERS = {
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
    ".csv": "csv",
}


#: Longest text (characters) a capture runs: far beyond any model's context, and what the
#: tokenizer holds of it stays well within the memory budget.
MAX_TEXT_CHARS = 1 << 20
#: Most tokens of one text a capture runs (after --max-tokens): a forward pass over one
#: sequence costs memory and time that grow with its length squared (attention), and 8192 is
#: beyond the context most models were trained for.
MAX_TEXT_TOKENS = 8192
#: Most text in all (characters over every sample; and bytes of a text file, read whole).
MAX_TOTAL_CHARS = 32 << 20
#: Most bytes of a dataset file (or directory of files) read through ``datasets``.
MAX_DATASET_BYTES = 256 << 20


def _shown(value: str, limit: int = 60) -> str:
    """A name from an input file, quoted and bounded for a one-line message."""
    return repr(value[:limit] + ("..." if len(value) > limit else ""))


class _Texts:
    """The texts read so far, each checked: at most :data:`MAX_TEXT_CHARS`, encodable as UTF-8
    (a lone surrogate, which JSON's ``\\ud800`` escapes make, is not), and at most
    :data:`MAX_TOTAL_CHARS` in all."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []
        self.total = 0

    def add(self, text: str, where: str) -> None:
        if len(text) > MAX_TEXT_CHARS:
            raise InputFileError(
                self.path,
                f"{where}: a text of {len(text)} characters, over the {MAX_TEXT_CHARS} a "
                "capture runs",
            )
        self.total += len(text)
        if self.total > MAX_TOTAL_CHARS:
            raise InputFileError(
                self.path,
                f"{where}: over {MAX_TOTAL_CHARS} characters of text in all (use "
                "--max-samples, or split the input)",
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputFileError(
                self.path,
                f"{where}: the text holds U+{ord(text[exc.start]):04X}, a lone surrogate, "
                "which is not text (not encodable as UTF-8)",
            ) from None
        self.items.append(text)

    def add_field(self, row: dict[str, Any], field: str, where: str) -> None:
        """Add ``row[field]``, which must be there and be text."""
        if field not in row:
            raise InputFileError(self.path, f"{where}: no field {_shown(field)}")
        value = row[field]
        if not isinstance(value, str):
            raise InputFileError(
                self.path, f"{where}: field {_shown(field)} is {type(value).__name__}, not text"
            )
        self.add(value, where)


def check_texts(texts: Sequence[str]) -> tuple[str, ...]:
    """Texts given on the command line (``--text``), checked as :class:`_Texts` checks a file's
    (argv may hold lone surrogates: Python decodes undecodable bytes to them)."""
    checked = _Texts(Path("--text"))
    for i, text in enumerate(texts):
        checked.add(text, f"text {i}")
    return tuple(checked.items)


def _lines(content: str) -> list[str]:
    """The lines of a text file: split at ``\\n`` only (``str.splitlines`` would also split
    at U+2028, U+0085, form feeds... inside a text or a JSON string), a CR before it dropped."""
    return [line.removesuffix("\r") for line in content.split("\n")]


def read_text_file(path: Path, field: str | None = None) -> tuple[str, ...]:
    """The texts of ``path``: JSON Lines when its suffix is in :data:`JSONL_SUFFIXES` or
    ``field`` is given (the text is ``obj[field]``, default ``"text"``), else one text per
    non-empty line. Lines end at ``\\n`` only. The file (at most :data:`MAX_TOTAL_CHARS`
    bytes) and each text are checked by :class:`_Texts`."""
    from rmsnorm_eps.sources.sniff import check_regular_file

    size = check_regular_file(path)
    if size > MAX_TOTAL_CHARS:
        raise InputFileError(
            path,
            f"{size} bytes of text, over the {MAX_TOTAL_CHARS} a capture reads (use a smaller "
            "file)",
        )
    try:
        with open(path, "rb") as fh:
            content = fh.read(MAX_TOTAL_CHARS + 1).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(content) > MAX_TOTAL_CHARS:
        raise InputFileError(path, f"over the {MAX_TOTAL_CHARS} bytes of text a capture reads")
    texts = _Texts(path)
    jsonl = field is not None or path.suffix.lower() in JSONL_SUFFIXES
    name = "text" if field is None else field
    for number, line in enumerate(_lines(content), start=1):
        if not line.strip():
            continue
        if not jsonl:
            texts.add(line, f"line {number}")
            continue
        try:
            obj = json.loads(line, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "not JSON"
            raise InputFileError(path, f"line {number}: not a JSON object ({problem})") from None
        if not isinstance(obj, dict):
            raise InputFileError(path, f"line {number}: not a JSON object")
        texts.add_field(obj, name, f"line {number}")
    if not texts.items:
        empty = "holds no JSON line" if jsonl else "holds no text (one text per non-empty line)"
        raise InputFileError(path, empty)
    return tuple(texts.items)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _quiet_libraries() -> None:
    """Third-party loggers write nothing on stderr (a failure is this tool's one line)."""
    import logging

    for name in ("datasets", "fsspec", "huggingface_hub", "filelock", "pyarrow"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.CRITICAL + 1)
        logger.propagate = False
    try:
        import datasets

        datasets.logging.set_verbosity(logging.CRITICAL + 1)
        datasets.disable_progress_bars()
    except (ImportError, AttributeError):
        pass


def _dataset_bytes(path: Path, max_samples: int | None) -> tuple[int, bool]:
    """Bytes of a dataset file, or of every file under a directory, and whether any of them
    is an Arrow file counted by what it decodes to (:func:`arrow_decoded_size`: its record
    batches, up to ``max_samples`` rows for a lone file) rather than its size on disk."""
    from rmsnorm_eps.capture.arrow_size import arrow_decoded_size

    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    total = 0
    decoded = False
    for f in files:
        if f.suffix.lower() == ".arrow":
            stop = None if path.is_dir() else max_samples
            total += max(arrow_decoded_size(f, stop).decoded, f.stat().st_size)
            decoded = True
        else:
            total += f.stat().st_size
        if total > MAX_DATASET_BYTES:
            break
    return total, decoded


def _parquet_texts(path: Path, field: str, max_samples: int | None, texts: _Texts) -> None:
    """The ``field`` column of a parquet file, in bounded batches, after checking from the
    file's own metadata that the column's decoded size (each row group's
    ``total_uncompressed_size``) is within :data:`MAX_TOTAL_CHARS`: a few KB of zstd can
    decode to gigabytes, and nothing is decoded before this check."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(str(path))
    schema = pf.schema_arrow
    if field not in schema.names:
        raise InputFileError(
            path, f"no field {_shown(field)} (columns: {', '.join(schema.names)[:200]})"
        )
    col = schema.names.index(field)
    meta = pf.metadata
    decoded = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        decoded += group.column(col).total_uncompressed_size
        if decoded > MAX_TOTAL_CHARS + 16 * group.num_rows:
            raise InputFileError(
                path,
                f"column {_shown(field)} decodes to over {decoded} bytes (row group {g}), over "
                f"the {MAX_TOTAL_CHARS} characters of text a capture reads",
            )
        if (
            max_samples is not None
            and sum(meta.row_group(i).num_rows for i in range(g + 1)) >= max_samples
        ):
            break
    number = 0
    for batch in pf.iter_batches(batch_size=256, columns=[field]):
        for row in batch.to_pylist():
            if max_samples is not None and len(texts.items) >= max_samples:
                return
            texts.add_field(row, field, f"row {number}")
            number += 1


def read_dataset(
    path: Path, *, split: str = "train", field: str = "text", max_samples: int | None = None
) -> tuple[str, ...]:
    """The ``field`` column of a local dataset (see the module docstring), first
    ``max_samples`` rows of ``split``. A data file is its own split (``split`` only labels it);
    a ``save_to_disk`` directory holding several splits needs the right ``split``.

    Sizes are checked before anything is decoded: a parquet file's column from its metadata
    (:func:`_parquet_texts`), an Arrow file by what its record batches decode to (their
    headers: compressed buffers record their plain length), other files (and directories) by
    their bytes on disk, at most :data:`MAX_DATASET_BYTES`; then each text and the total as
    :class:`_Texts` checks them."""
    import importlib.util

    if importlib.util.find_spec("datasets") is None:
        raise MissingExtraError("datasets", "datasets", "capture --dataset")
    if not path.exists():
        raise InputFileError(path, "no such file or directory")
    texts = _Texts(path)
    suffix = path.suffix.lower()
    try:
        if not path.is_dir() and suffix == ".parquet":
            _parquet_texts(path, field, max_samples, texts)
        else:
            size, decoded = _dataset_bytes(path, max_samples)
            if size > MAX_DATASET_BYTES:
                raise InputFileError(
                    path,
                    f"{'decodes to over ' if decoded else ''}{size} bytes, over the "
                    f"{MAX_DATASET_BYTES >> 20} MiB of dataset files a capture reads",
                )
            _library_texts(path, split, field, max_samples, texts)
    except (InputFileError, MissingExtraError):
        raise
    except Exception as exc:  # datasets/pyarrow raise many types for a malformed file
        raise InputFileError(
            path, f"cannot read the dataset: {' '.join(str(exc).split())[:200]}"
        ) from None
    if not texts.items:
        raise InputFileError(path, "holds no row")
    return tuple(texts.items)


def _library_texts(
    path: Path, split: str, field: str, max_samples: int | None, texts: _Texts
) -> None:
    """The texts of a dataset read through ``datasets`` (offline, its loggers silenced)."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    _quiet_libraries()
    import datasets

    _quiet_libraries()
    if path.is_dir():
        data: Any = datasets.load_from_disk(str(path))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise InputFileError(
                    path,
                    f"no split {_shown(split)} (it has {', '.join(sorted(data))[:200]})",
                )
            data = data[split]
        rows: Any = data
    else:
        builder = _DATASET_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise InputFileError(path, "not a dataset file (.parquet, .arrow, .jsonl, .json, .csv)")
        rows = datasets.load_dataset(
            builder, data_files={"data": str(path)}, split="data", streaming=True
        )
    names = list(rows.column_names or [])
    if names and field not in names:
        raise InputFileError(path, f"no field {_shown(field)} (columns: {', '.join(names)[:200]})")
    for number, row in enumerate(rows):
        if max_samples is not None and len(texts.items) >= max_samples:
            break
        texts.add_field(row, field, f"row {number}")


@dataclass(frozen=True)
class Batch:
    """One forward pass: the sample indices it holds, in row order."""

    samples: tuple[int, ...]


def tokenize(tokenizer: Any, texts: Sequence[str], max_tokens: int | None) -> list[list[int]]:
    """Token ids of every text (the tokenizer's special tokens included), each truncated to
    ``max_tokens``; a text of more than :data:`MAX_TEXT_TOKENS` tokens after that is refused
    (one line saying to give ``--max-tokens``)."""
    enc = tokenizer(
        list(texts), truncation=max_tokens is not None, max_length=max_tokens, padding=False
    )
    ids = enc["input_ids"]
    for i, row in enumerate(ids):
        if not row:
            raise CaptureError(f"text {i} produced no tokens")
        if len(row) > MAX_TEXT_TOKENS:
            raise CaptureError(
                f"text {i} is {len(row)} tokens long, over the {MAX_TEXT_TOKENS} a capture runs "
                f"per text: give --max-tokens N (N <= {MAX_TEXT_TOKENS}) to keep each text's "
                "first N tokens, or split the text"
            )
    return [list(map(int, row)) for row in ids]


def plan_batches(lengths: Sequence[int], batch_size: int, sort: bool = True) -> tuple[Batch, ...]:
    """Batches of at most ``batch_size`` samples; with ``sort`` the samples go by increasing
    length (ties by index), else in their order."""
    if batch_size < 1:
        raise CaptureError(f"batch size must be >= 1, got {batch_size}")
    # sorted() is stable: ties keep their index order
    seq = sorted(range(len(lengths)), key=lengths.__getitem__) if sort else range(len(lengths))
    return tuple(Batch(tuple(seq[i : i + batch_size])) for i in range(0, len(seq), batch_size))


def shard_batches(batches: Sequence[Batch], rank: int, world: int) -> tuple[Batch, ...]:
    """Rank ``rank``'s contiguous run of ``batches`` (of ``world`` ranks): the first
    ``len % world`` ranks get one batch more; a rank gets none when there are fewer batches
    than ranks."""
    if world < 1 or not 0 <= rank < world:
        raise CaptureError(f"rank {rank} is not in a world of {world}")
    base, extra = divmod(len(batches), world)
    start = rank * base + min(rank, extra)
    return tuple(batches[start : start + base + (1 if rank < extra else 0)])


def run_batches(
    model: Any,
    ids: Sequence[Sequence[int]],
    batches: Sequence[Batch],
    *,
    pad_id: int,
    device: Any,
    progress: Callable[[int, int], None] | None = None,
    family: str = "causal",
) -> int:
    """Run each batch (right-padded with ``pad_id``, attention mask 0 on padding) through
    ``model`` on ``device`` without gradients; returns the real tokens run.
    ``progress(samples, tokens)`` is called with the totals so far after each batch.
    ``family`` is :func:`rmsnorm_eps.capture.loading.model_family`'s (an encoder-decoder model
    gets its decoder inputs too)."""
    import torch

    from rmsnorm_eps.capture.loading import forward

    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    samples = tokens = 0
    for batch in batches:
        rows = [ids[i] for i in batch.samples]
        width = max(len(r) for r in rows)
        top = max(max(r) for r in rows)
        if vocab is not None and top >= vocab:
            raise CaptureError(
                f"the tokenizer produced token id {top} >= the model's vocab_size "
                f"{vocab}: tokenizer and model do not match"
            )
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(rows), width), dtype=torch.int64)
        for j, r in enumerate(rows):
            input_ids[j, : len(r)] = torch.tensor(r, dtype=torch.int64)
            mask[j, : len(r)] = 1
        forward(model, family, input_ids, mask, device)
        samples += len(rows)
        tokens += sum(len(r) for r in rows)
        if progress is not None:
            progress(samples, tokens)
    return tokens
