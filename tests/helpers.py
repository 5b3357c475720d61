"""Helpers shared by test modules (no test module imports another: they import from here)."""

from __future__ import annotations

import shlex
import struct
import zlib
from pathlib import Path

import click
import typer.main
from typer.testing import CliRunner

from rmsnorm_eps.cli import app
from rmsnorm_eps.cli._commands import COMMANDS


def cli_command_paths() -> list[tuple[str, ...]]:
    """Every command of the CLI as the words that run it (``("ratio",)``, ``("config",
    "diff")``), derived from :data:`rmsnorm_eps.cli._commands.COMMANDS` (a group's
    subcommands from the group itself), sorted."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    paths: list[tuple[str, ...]] = []
    for name in COMMANDS:
        command = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if isinstance(command, click.Group):
            if command.invoke_without_command:  # ``parity`` runs itself, ``parity onnx`` too
                paths.append((name,))
            paths.extend((name, sub) for sub in command.list_commands(ctx))
        else:
            paths.append((name,))
    return sorted(paths)


# ---------------------------------------------------------------- golden reports
_GOLDEN_COMPARE = (
    "compare",
    "--q-file",
    "examples/q_dump.npz",
    "--from",
    "eps=1e-6",
    "--to",
    "eps=1e-5",
    "--top",
    "3",
)
_GOLDEN_PARITY = ("parity", "--probes", "examples/parity/probes.npz", "--actual")
#: The golden report cases (tests/golden/<name>.<ext>): name -> (arguments, expected exit code).
GOLDEN_CASES: dict[str, tuple[tuple[str, ...], int]] = {
    # name: (arguments, expected exit code)
    "ratio": (("ratio", "--eps", "1e-5", "--q-file", "examples/ci/q_dump.npz", "--top", "3"), 1),
    "ratio-budget": (
        (
            "ratio",
            "--eps",
            "1e-5",
            "--q-file",
            "examples/ci/q_dump.npz",
            "--top",
            "3",
            "--max-violations",
            "10",
        ),
        0,
    ),
    "bound": (("bound", "--delta", "0.01", "--eps", "1e-5"), 0),
    "compare": (_GOLDEN_COMPARE, 1),
    "compare-budget": ((*_GOLDEN_COMPARE, "--max-violations", "2"), 0),
    "precision": (("precision", "--eps", "1e-8"), 1),
    "parity": ((*_GOLDEN_PARITY, "examples/parity/torch_eps_none.npy"), 1),
    "parity-pass": ((*_GOLDEN_PARITY, "examples/parity/torch_eps_1e-6.npy"), 0),
    "config-diff": (("config", "diff", "configs/llama-3-8b.yaml", "configs/qwen3-8b.yaml"), 1),
    # examples/ci/q_dump.npz in two shards (tests/data/merge/make_shards.py)
    "merge": (
        (
            "merge",
            "tests/data/merge/shard0.summary.json",
            "tests/data/merge/shard1.summary.json",
            "--top",
            "3",
        ),
        1,
    ),
}


# ---------------------------------------------------------------- hostile names, outputs
#: Every report format.
FORMAT_NAMES = ("text", "json", "markdown", "github", "junit", "sarif")
# Member names hold no "::" (such a member is a companion array, e.g. ``x::position``); the
# ``::`` attacks ride on the file name and on ":" next to the report's own ": ".
HOSTILE_NAMES = (
    "x##[stop-commands]t",
    "##vso[task.setvariable variable=a]b",
    "##[error title=forged]PASS",
    "[/x]",
    "[link=http://e]a[/link]",
    "[conceal]hidden",
    "\x1b]8;;http://e\x07link\x1b]8;;\x07",
    "\x1b[2J\x1b[31mred",
    "<img src=x>",
    "</details>",
    "<h1>PASS</h1>",
    "a\nb",
    "c\rd",
    "tab\there",
    "\u2028sep\u2029",
    "e\x85f\x9b",
    "del\x7f",
    "bidi\u202egnp.exe",
    "$\\frac{1}{$",
    ":",
    " :",
    "h|i",
    "&amp;",
    "`x``",
    "n" * 10_000,
)


HOSTILE_CONFIG_NAMES = (
    "##[error]x",
    "[/x]",
    "<img src=x>",
    "a\x1b[31mb",
    "::warning::w",
    "$\\frac{1}{$",
    "p\u2028q",
)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking signature and CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    assert crc == zlib.crc32(kind + body)
    width, height = struct.unpack(">II", body[:8])
    assert data.endswith(b"IEND\xaeB`\x82")
    return width, height


# ---------------------------------------------------------------- console blocks of the docs
def console_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line indices of the bodies of ```console blocks."""
    out, start = [], None
    for i, line in enumerate(lines):
        if start is None and line.strip() == "```console":
            start = i + 1
        elif start is not None and line.strip() == "```":
            out.append((start, i))
            start = None
    return out


def run_console(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] == "rmsnorm-eps", command
    res = CliRunner().invoke(app, argv[1:], env={"NO_COLOR": "1", "RMSNORM_EPS_FORMAT": ""})
    text = res.stdout + res.stderr
    # only trailing blank lines are dropped: a leading blank line the command prints is shown
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def console_commands(body: list[str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, list[str]]] = []
    for line in body:
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line.rstrip())
    return [(cmd, "\n".join(out).rstrip("\n")) for cmd, out in pairs]


# ---------------------------------------------------------------- tiny models (torch, transformers)
#: Words of the word-level tokenizer of :func:`make_model_dir`.
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello"]
# token counts 9, 3, 1, 5, 3 (word-level tokenizer, no special tokens)
TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "hello w1 w2",
    "fox",
    "w3 w4 w5 w6 w7",
    "dog w8 hello",
]


def tiny_llama(eps: float = 1e-5) -> object:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=eps,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_qwen3() -> object:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-6,
    )
    return Qwen3ForCausalLM(cfg).eval()


def tiny_gemma3() -> object:
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(2)
    cfg = Gemma3TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-6,
    )
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():  # Gemma weights start at 0 (gain 1): make 1 + w differ from w
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.5, 0.5)
    return model


def make_model_dir(d: Path) -> Path:
    """A tiny random Llama with a word-level tokenizer, saved as a model directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tiny_llama().save_pretrained(d)  # type: ignore[attr-defined]
    vocab = ["[UNK]", "[PAD]"] + [f"w{i}" for i in range(40)] + WORDS  # 51 ids < vocab 64
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]"
    ).save_pretrained(d)
    return d
