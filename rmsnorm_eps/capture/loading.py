"""Loading a local Hugging Face model directory (or a GGUF file in it) offline, and running texts.

Nothing is ever downloaded: HF_HUB_OFFLINE=1 is set before transformers is imported and every
``from_pretrained`` gets ``local_files_only=True``.

The model class follows the config (:func:`model_family`): an encoder-decoder config
(``is_encoder_decoder``, T5-like) loads with ``AutoModelForSeq2SeqLM`` and runs each text through
the encoder and, shifted right by one token behind the decoder start token, through the decoder
(teacher forcing). Otherwise the class names in ``architectures`` are looked up in transformers'
own auto mappings (``transformers.models.auto.modeling_auto``): a class its causal-LM mapping
lists (``ReformerModelWithLMHead``, ``BertGenerationDecoder``, any ``*ForCausalLM``) loads with
``AutoModelForCausalLM``; one of its base-model or encoder-head mappings
(``BertGenerationEncoder``, ``*ForMaskedLM``, ...) loads the base model with ``AutoModel``. A
name no mapping lists is read by its ending, as before: ``ForCausalLM``, ``LMHeadModel``,
``ForConditionalGeneration`` (causal), ``Model``, ``ForMaskedLM``, ... (encoder). When that Auto
class does not map the config (Chameleon's ``ChameleonForConditionalGeneration`` is no
``AutoModelForCausalLM``; ``SiglipTextConfig`` is in no model mapping), the class the config's
``architectures`` names is loaded, as transformers defines it, when that class is built from
this config class (:func:`model_class`). Any other architecture is refused with its name.

A GGUF file is parsed once per load (:func:`gguf_parsed_once`), not four times as transformers'
loader would (about 70% of a small model's capture).

Why one module: finding the model class, the offline load with its one GGUF parse, and
running the texts are the one path from a directory to hooked forward passes; the GGUF
sharing only exists for that load.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.dtypes import DTYPE_ALIASES
from rmsnorm_eps.errors import InputFileError, MissingExtraError

__all__ = [
    "DTYPES",
    "GgufParses",
    "LoadedModel",
    "forward",
    "gguf_parsed_once",
    "input_device",
    "load_model",
    "model_class",
    "model_family",
    "placement",
    "private_checkpoint",
    "private_copy",
    "resolve_device",
    "run_texts",
]

_CAUSAL = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
_ENCODER = (
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
    "ForPreTraining",
    "ForNextSentencePrediction",
    "Model",
)
_SUPPORTED = (
    "causal LMs (*ForCausalLM, *LMHeadModel, *ForConditionalGeneration), encoder-decoder "
    "models (is_encoder_decoder, T5-like) and encoder-only models (*Model, *ForMaskedLM, "
    "*ForSequenceClassification, ...)"
)


@dataclass(frozen=True)
class LoadedModel:
    """A model in eval mode, its tokenizer, and a name for reports."""

    model: Any
    tokenizer: Any
    name: str
    source: str
    family: str = "causal"
    device: str = "cpu"
    #: Wall seconds of the load (config, tokenizer and weights), for ``--debug`` timing.
    load_seconds: float = 0.0
    #: Weights the checkpoint did not hold, left at random (only with ``allow_random_weights``).
    random_weights: tuple[str, ...] = ()
    #: Lines for the user about the load (tensors of sub-models the loaded class has none of).
    notes: tuple[str, ...] = ()


def model_family(config: Any) -> str:
    """'encoder-decoder', 'causal' or 'encoder' for a transformers config (see the module
    docstring); raises :class:`CaptureError` naming an unsupported architecture."""
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    archs = _architectures(config)
    for arch in archs:
        if (mapped := _mapped_family(str(arch))) is not None:
            return mapped
    for arch in archs:
        text = str(arch)
        if text.endswith(_CAUSAL):
            return "causal"
        if text.endswith(_ENCODER):
            return "encoder"
    if not archs:
        return "causal"
    shown = ", ".join(repr(str(a)[:60]) for a in archs[:3])
    raise CaptureError(f"architecture {shown} is not supported: capture loads {_SUPPORTED}")


#: transformers' auto mappings (modeling_auto) whose classes each family loads, in this order
_FAMILY_MAPPINGS = (
    ("causal", ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",)),
    (
        "encoder",
        (
            "MODEL_MAPPING_NAMES",
            "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES",
            "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
            "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
            "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
            "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
            "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES",
        ),
    ),
)


def _mapped_family(arch: str) -> str | None:
    """The family whose auto mapping lists the class named ``arch`` (any model type), or None."""
    from transformers.models.auto import modeling_auto

    for family, tables in _FAMILY_MAPPINGS:
        for table in tables:
            for names in getattr(modeling_auto, table, {}).values():
                if arch == names or (isinstance(names, tuple) and arch in names):
                    return family
    return None


def _architectures(config: Any) -> list[Any]:
    archs = getattr(config, "architectures", None) or []
    return list(archs) if isinstance(archs, list | tuple) else [archs]


def _own_class(config: Any, arch: str) -> Any:
    """The class named ``arch`` in transformers' module for the config's model type (or at the
    top of transformers), when it is a PreTrainedModel; else None."""
    import importlib

    import transformers

    if not arch.isidentifier():
        return None
    found = None
    model_type = str(getattr(config, "model_type", "") or "").replace("-", "_")
    if model_type.isidentifier():
        try:
            module = importlib.import_module(f"transformers.models.{model_type}")
            found = getattr(module, arch, None)
        except ImportError:
            found = None
    if found is None:
        found = getattr(transformers, arch, None)
    if not (isinstance(found, type) and issubclass(found, transformers.PreTrainedModel)):
        return None
    own = getattr(found, "config_class", None)  # built from this config class, not another
    return found if isinstance(own, type) and isinstance(config, own) else None


def model_class(config: Any, family: str | None = None) -> Any:
    """The class :func:`load_model` loads a config with (see the module docstring): the Auto
    class of its ``family`` (:func:`model_family`) when that maps the config, else the model's
    own class its ``architectures`` names; raises :class:`CaptureError` naming the class when
    neither exists."""
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    family = family or model_family(config)
    auto: Any = {
        "causal": AutoModelForCausalLM,
        "encoder-decoder": AutoModelForSeq2SeqLM,
        "encoder": AutoModel,
    }[family]
    if type(config) in auto._model_mapping:
        return auto
    archs = _architectures(config)
    for arch in archs:
        if (cls := _own_class(config, str(arch))) is not None:
            return cls
    named = ", ".join(repr(str(a)[:60]) for a in archs[:3]) or "(no architectures entry)"
    raise CaptureError(
        f"architecture {named} ({type(config).__name__}) is not registered with "
        f"{auto.__name__} and transformers {transformers.__version__} has no such model class"
    )


# The --dtype spellings a model may be loaded in -> the torch dtype name, from the one dtype
# vocabulary (rmsnorm_eps.dtypes); float64 and the other spellings are not offered here.
DTYPES = {
    alias: DTYPE_ALIASES[alias]
    for alias in ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
}


def resolve_device(device: str) -> str:
    """Check a ``--device`` value against what this machine has and return the device to use:
    ``cpu``, ``cuda`` (the current CUDA device), ``cuda:N``, ``mps``, or ``auto`` (accelerate's
    ``device_map="auto"`` over the visible GPUs; ``cpu`` when none is visible)."""
    _require("torch")
    import torch

    name = device.strip().lower()
    if name not in ("cpu", "mps", "auto", "cuda") and not (
        name.startswith("cuda:") and name[5:].isdigit()
    ):
        raise CaptureError(f"--device {device[:40]!r} is not one of cpu, cuda, cuda:N, mps, auto")
    cuda_n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name == "auto":
        return "auto" if cuda_n else "cpu"
    if name.startswith("cuda"):
        if not cuda_n:
            raise CaptureError(f"--device {name}: no CUDA device is visible to torch")
        index = int(name[5:]) if ":" in name else torch.cuda.current_device()
        if index >= cuda_n:
            raise CaptureError(f"--device {name}: only {cuda_n} CUDA device(s) are visible")
        return f"cuda:{index}"
    if name == "mps" and not (
        getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    ):
        raise CaptureError("--device mps: the MPS backend is not available here")
    return name


def placement(device: str, dtype: str) -> dict[str, Any]:
    """``from_pretrained`` keywords that load the model in ``dtype`` onto ``device`` (a value
    of :func:`resolve_device`): ``auto`` spreads the layers over the visible GPUs with
    accelerate (``device_map="auto"``); any other device gets the whole model."""
    import torch

    canonical = DTYPES.get(dtype)
    if canonical is None:
        raise CaptureError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype[:40]!r}")
    kw: dict[str, Any] = {"dtype": getattr(torch, canonical)}
    if device != "cpu":  # on the CPU, the plain load (no device map) as before
        kw["device_map"] = device
    return kw


def input_device(model: Any) -> Any:
    """Where the model's inputs go: the device of its input embeddings (the first layer under
    ``device_map="auto"``), else of its first parameter."""
    import torch

    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        for p in model.parameters():
            return p.device
    return torch.device("cpu")


def _require(package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(package) is None:
        raise MissingExtraError(package, "torch", "capture")


def load_model(
    directory: str | os.PathLike[str],
    gguf: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    *,
    allow_random_weights: bool | None = None,
) -> LoadedModel:
    """Load ``directory`` (config.json + weights, or ``gguf``, a file name inside it) offline,
    in ``dtype`` (a key of :data:`DTYPES`) onto ``device`` (see :func:`resolve_device`).

    The config is checked first (:func:`~rmsnorm_eps.capture.model_config.check_model_config`);
    an error raised while transformers builds the model from it is one line
    (:func:`~rmsnorm_eps.capture.model_config.model_build_error`); a checkpoint that lacks
    some of the model's weights, or holds tensors the model has no place for, is refused
    (:func:`~rmsnorm_eps.capture.checkpoint.check_weights`) unless ``allow_random_weights``,
    when the names left random are in :attr:`LoadedModel.random_weights`. False: refused, and
    the message names capture's ``--allow-random-weights``; None (sensitivity, which has no
    such option): refused, and the message says that only capture has it."""
    from rmsnorm_eps.capture.checkpoint import (
        check_parameter_count,
        check_weights,
        outside_weights_note,
    )
    from rmsnorm_eps.capture.model_config import (
        check_config_document,
        check_model_config,
        model_build_error,
    )

    d = _check_paths(Path(directory), gguf)
    present = check_model_config(d)
    os.environ["HF_HUB_OFFLINE"] = "1"
    if not sys.stderr.isatty():  # the GGUF loader's tqdm bar: only on a terminal
        os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    started = time.perf_counter()
    import transformers
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    where_to = placement(resolve_device(device), dtype)
    kw: dict[str, Any] = {"local_files_only": True}
    if gguf is not None:
        kw["gguf_file"] = gguf
    try:
        with gguf_parsed_once() if gguf is not None else nullcontext():
            config = AutoConfig.from_pretrained(str(d), **kw)
            if gguf is not None:  # the sizes its metadata gives, against its tensor table
                present = _gguf_present(d / gguf)
                check_config_document(d / gguf, config.to_dict(), present)
            tokenizer = AutoTokenizer.from_pretrained(str(d), config=config, **kw)
            family = model_family(config)
            cls = model_class(config, family)
            check_parameter_count(d, cls, config, present)
            # safetensors weights from private in-memory copies, never a map of the files;
            # a tensor of another shape than the config's is listed (mismatched_keys) and
            # refused by check_weights with its name, not raised as transformers' RuntimeError
            with private_checkpoint(d, present) if gguf is None else nullcontext(d) as weights:
                model, info = cls.from_pretrained(
                    str(weights),
                    config=config,
                    output_loading_info=True,
                    ignore_mismatched_sizes=True,
                    **where_to,
                    **kw,
                )
    except (OSError, ValueError, KeyError) as exc:
        raise InputFileError(
            d / gguf if gguf else d, f"cannot load the model: {' '.join(str(exc).split())[:300]}"
        ) from None
    except (ArithmeticError, TypeError, AttributeError, IndexError) as exc:
        raise model_build_error(d, exc) from None
    random = check_weights(
        d / gguf if gguf else d, info, model, family, allow_random=allow_random_weights
    )
    note = outside_weights_note(info, model, family)
    model.eval()
    if tokenizer.pad_token is None:
        # Padding positions are masked out and never captured, so any id serves as filler.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    tokenizer.padding_side = "right"
    name = Path(gguf).stem if gguf else d.name
    # The model directory by its name, never its absolute path: --config-out writes this into
    # a file meant to be committed, where a path of this machine means nothing.
    shown = f"{d.resolve().name}/{gguf}" if gguf else d.resolve().name
    source = f"live modules of {shown} (transformers {transformers.__version__})"
    return LoadedModel(
        model,
        tokenizer,
        name,
        source,
        family,
        str(where_to.get("device_map", "cpu")),
        time.perf_counter() - started,
        random,
        () if note is None else (note,),
    )


def _check_paths(d: Path, gguf: str | None) -> Path:
    """The extras a load needs are installed, ``d`` is a model directory (config.json, or the
    GGUF file ``gguf`` inside it); returns ``d``."""
    for package in ("torch", "transformers", "accelerate"):
        _require(package)
    if gguf is not None:
        _require("gguf")
    if not d.is_dir():
        raise InputFileError(d, "no such directory" if not d.exists() else "is not a directory")
    if gguf is not None:
        gpath = d / gguf
        if Path(gguf).name != gguf:
            raise CaptureError(f"--gguf takes a file name inside {d}, got {gguf!r}")
        if not gpath.is_file():
            raise InputFileError(gpath, "no such GGUF file in the model directory")
    elif not (d / "config.json").is_file():
        raise InputFileError(
            d, "not a model directory: no config.json (give --gguf FILE for a GGUF model)"
        )
    return d


def _gguf_present(path: Path) -> Any:
    """The tensor table of a GGUF file (``checkpoint.gguf_weights_present``), read through
    ``gguf.GGUFReader`` (within :func:`gguf_parsed_once`: the shared parse)."""
    import gguf

    from rmsnorm_eps.capture.checkpoint import gguf_weights_present

    return gguf_weights_present(gguf.GGUFReader(str(path)), path)


@dataclass
class GgufParses:
    """What :func:`gguf_parsed_once` shared: the files parsed (``readers``: one
    ``gguf.GGUFReader`` per file) and the metadata requests answered from the first parse
    (``reused``)."""

    readers: dict[str, Any] = field(default_factory=dict)
    reused: int = 0
    name_maps: dict[tuple[Any, int], Any] = field(default_factory=dict)


#: Bytes copied at a time by :func:`private_copy`.
_COPY_CHUNK = 1 << 24


def private_copy(path: Path, label: str = "gguf") -> Any:
    """An anonymous in-memory file (``memfd``, named ``rmsnorm-eps-<label>``) holding a copy of
    ``path``, as a file object that ``np.memmap`` (which ``gguf.GGUFReader`` uses) or, through
    ``/proc/self/fd/N``, safetensors' ``safe_open`` maps; None where Linux's ``memfd_create``
    is missing (the file itself is mapped then).

    Why: the gguf package and safetensors memory-map the file and transformers reads the
    weights out of that map (tensors of the model's dtype can stay views of it); a mapped file
    that another process truncates kills the process by SIGBUS with nothing on stderr. No
    other process can shrink the copy. A copy that comes up short of the size the file had
    when opened is the one line "file changed while being read". Cost: the file's size in
    memory while the model is loaded.
    """
    memfd_create: Any = getattr(os, "memfd_create", None)
    if memfd_create is None:  # pragma: no cover - not Linux
        return None
    try:
        with open(path, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            dst = os.fdopen(memfd_create(f"rmsnorm-eps-{label}", os.MFD_CLOEXEC), "w+b")
            done = 0
            while done < size:
                part = os.pread(src.fileno(), min(_COPY_CHUNK, size - done), done)
                if not part:
                    dst.close()
                    raise InputFileError(
                        path,
                        f"file changed while being read: it had {size} bytes when opened, "
                        f"{done} when copied for loading (was it rewritten or truncated by "
                        "another process?)",
                    )
                dst.write(part)
                done += len(part)
            dst.flush()
            dst.seek(0)
            return dst
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


#: The checkpoints :func:`private_checkpoint` copies, in transformers' order of preference.
_CHECKPOINTS = ("model.safetensors", "pytorch_model.bin")
#: Files of a model directory ``from_pretrained`` also reads (its generation config, from
#: config.json without one), linked beside the private copies of the weights.
_READ_BESIDE = ("config.json", "generation_config.json")


@contextmanager
def private_checkpoint(directory: Path, present: Any) -> Iterator[Path]:
    """For the ``with`` block: a private directory holding, as links to in-memory copies
    (:func:`private_copy`, through ``/proc/self/fd``), the checkpoint of ``directory``
    (``model.safetensors``, or the index and the shards it names; without one, the same of
    ``pytorch_model.bin``), for ``from_pretrained`` to load instead of ``directory``;
    ``directory`` itself where it has neither or Linux's ``memfd_create`` is missing.

    Why: transformers reads safetensors weights through ``safe_open``, a memory map of the
    file (a ``.bin`` through ``torch.load(mmap=True)``), and a mapped file that another
    process truncates kills the process by SIGBUS with nothing on stderr. The copies are
    checked against the size each file had when opened and safetensors headers against
    ``present`` (:func:`~rmsnorm_eps.capture.checkpoint.weights_present`
    of ``directory``, read before: the sizes the model was capped with); either differing is
    the one line "file changed while being read". Cost: the checkpoint's size in memory until
    the block ends (and for as long as a weight of the model's dtype is a view of its copy).
    """
    from rmsnorm_eps.capture.checkpoint import shard_names, weights_present

    has_memfd = getattr(os, "memfd_create", None) is not None and os.path.isdir("/proc/self/fd")
    # transformers' order: safetensors first, else the pickled .bin (torch.load maps it too)
    single = next((n for n in _CHECKPOINTS if shard_names(directory, n)), None)
    if not has_memfd or single is None:
        yield directory
        return
    copies: list[Any] = []
    try:
        with tempfile.TemporaryDirectory(prefix="rmsnorm-eps-weights-") as tmp:
            private = Path(tmp)

            def link(name: str) -> None:
                copies.append(private_copy(directory / name, "weights"))
                os.symlink(f"/proc/self/fd/{copies[-1].fileno()}", private / name)

            if (directory / f"{single}.index.json").is_file():
                link(f"{single}.index.json")  # the shards the copied index names
            for name in shard_names(private, single) if copies else [single]:
                if not (directory / name).is_file():
                    raise InputFileError(directory / name, "file changed while being read: gone")
                link(name)
            for name in _READ_BESIDE:  # read by json, never mapped: the files themselves
                if (directory / name).is_file():
                    os.symlink((directory / name).absolute(), private / name)
            if weights_present(private) != present:
                raise InputFileError(
                    directory,
                    "file changed while being read: the safetensors headers copied for loading "
                    "differ from those the model's sizes were checked against (was the "
                    "checkpoint rewritten by another process?)",
                )
            yield private
    finally:
        for each in copies:
            each.close()


@contextmanager
def gguf_parsed_once() -> Iterator[GgufParses]:
    """For the ``with`` block only: every ``gguf.GGUFReader(path)`` of one file returns the
    same reader, and transformers' ``load_gguf_checkpoint(path)`` without tensors (the config
    and tokenizer metadata) is parsed once and handed out as deep copies, so that callers may
    change theirs; ``gguf.get_tensor_name_map(arch, n_blocks)``, which transformers rebuilds
    for every submodule of the model while it maps the weights' names (about 400 times for
    SmolLM2), is built once per ``(arch, n_blocks)``. All three are put back when the block
    ends, also on an error.

    The reader maps a private in-memory copy of the file (:func:`private_copy`), not the file.

    Why this is sound: a ``GGUFReader`` opened read-only is a memory map plus the parsed
    field and tensor tables; transformers only reads them (the weights are dequantized into
    new arrays), so one reader serves every call. The file must not change during the load
    (the reader of a changed file would be wrong for the first caller too). A
    ``TensorNameMap`` is a lookup table filled by its constructor and only read afterwards.
    """
    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    parses = GgufParses()
    make_reader: Any = getattr(gguf, "GGUFReader", None)
    load_checkpoint: Any = getattr(hf_gguf, "load_gguf_checkpoint", None)
    name_map: Any = getattr(gguf, "get_tensor_name_map", None)
    metadata: dict[str, Any] = {}

    def shared_name_map(arch: Any, n_blocks: int) -> Any:
        key = (arch, n_blocks)
        if key not in parses.name_maps:
            parses.name_maps[key] = name_map(arch, n_blocks)
        return parses.name_maps[key]

    def shared_reader(path: str | os.PathLike[str], mode: Any = "r") -> Any:
        if mode != "r":
            return make_reader(path, mode)
        key = os.path.realpath(path)
        if key not in parses.readers:
            private = private_copy(Path(path))
            parses.readers[key] = make_reader(path if private is None else private, mode)
        return parses.readers[key]

    def shared_checkpoint(path: str, return_tensors: bool = False, **kw: Any) -> Any:
        if return_tensors:
            return load_checkpoint(path, return_tensors=True, **kw)
        key = os.path.realpath(path)
        if key in metadata:
            parses.reused += 1
        else:
            metadata[key] = load_checkpoint(path, return_tensors=False, **kw)
        return copy.deepcopy(metadata[key])

    patches = [  # only what this gguf / transformers has: a missing one is left alone
        (module, attr, original, shared)
        for module, attr, original, shared in (
            (gguf, "GGUFReader", make_reader, shared_reader),
            (hf_gguf, "load_gguf_checkpoint", load_checkpoint, shared_checkpoint),
            (gguf, "get_tensor_name_map", name_map, shared_name_map),
        )
        if original is not None
    ]
    for module, attr, _, shared in patches:
        setattr(module, attr, shared)
    try:
        yield parses
    finally:
        for module, attr, original, _ in patches:
            setattr(module, attr, original)


def run_texts(
    loaded: LoadedModel,
    texts: Sequence[str],
    *,
    max_tokens: int | None = None,
    batch_size: int = 8,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Run the texts through the model (no gradients) in padded batches of ``batch_size``,
    each truncated to ``max_tokens`` tokens; returns the number of real tokens run.
    ``progress(n)`` is called with the number of texts finished after each batch."""
    if not texts:
        raise CaptureError("no text to run")
    target = input_device(loaded.model)
    tok = loaded.tokenizer
    total = 0
    vocab = getattr(loaded.model.config, "vocab_size", None)
    for done in range(0, len(texts), batch_size):
        chunk = list(texts[done : done + batch_size])
        enc = tok(
            chunk,
            return_tensors="pt",
            padding=True,
            truncation=max_tokens is not None,
            max_length=max_tokens,
        )
        ids = enc["input_ids"]
        if ids.shape[1] == 0:
            raise CaptureError("a text produced no tokens")
        if vocab is not None and int(ids.max()) >= vocab:
            raise CaptureError(
                f"the tokenizer produced token id {int(ids.max())} >= the model's vocab_size "
                f"{vocab}: tokenizer and model do not match"
            )
        forward(loaded.model, loaded.family, ids, enc["attention_mask"], target)
        total += int(enc["attention_mask"].sum())
        if progress is not None:
            progress(done + len(chunk))
    return total


def forward(model: Any, family: str, ids: Any, mask: Any, device: Any) -> None:
    """One forward pass without gradients, inputs moved to ``device``. An encoder-decoder
    model (``family`` "encoder-decoder") gets the decoder inputs of teacher forcing (the ids
    shifted right) with the same mask, so both stacks see the text."""
    import torch

    with torch.no_grad():
        if family == "encoder-decoder":
            model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                decoder_input_ids=_shift_right(model.config, ids).to(device),
                decoder_attention_mask=mask.to(device),
            )
        else:
            model(input_ids=ids.to(device), attention_mask=mask.to(device))


def _shift_right(config: Any, ids: Any) -> Any:
    """The decoder inputs of teacher forcing: the decoder start token, then ids[:-1]."""
    import torch

    start = getattr(config, "decoder_start_token_id", None)
    if start is None:
        start = getattr(config, "pad_token_id", None) or 0
    out = torch.full_like(ids, int(start))
    out[:, 1:] = ids[:, :-1]
    return out
