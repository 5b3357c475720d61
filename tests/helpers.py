"""Helpers shared by test modules (no test module imports another: they import from here)."""

from __future__ import annotations

from pathlib import Path

import click
import typer.main

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
