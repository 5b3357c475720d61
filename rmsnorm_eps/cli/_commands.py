"""The table of commands: the module that defines each one, and its line in ``--help``.

A command is built (typer reads its signature, click makes its options) only when it is run or
its own help is shown: ``rmsnorm-eps --help`` lists the commands from this table, and
``rmsnorm-eps bound`` builds ``bound`` alone. Building every command at start-up was about a
third of the start-up of ``--help`` and ``bound`` (benchmarks/bench_stream.py, "start-up").

Adding a command: its module under ``rmsnorm_eps/cli/`` registers it on ``app`` with
``short_help=short_help("name")``, and one line here names the module and gives that help.
``tests/unit/test_cli_commands.py`` checks that every line builds the command it names.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["COMMANDS", "Entry", "short_help"]


class Entry(NamedTuple):
    """A command's module (under ``rmsnorm_eps.cli``) and its one-line help."""

    module: str
    help: str


#: Every command, in the order ``--help`` lists them.
COMMANDS: dict[str, Entry] = {
    "bound": Entry(
        "bound_cmd",
        "Minimum q/eps (q, input RMS) for a tolerated attenuation; A at given q/eps.",
    ),
    "capture": Entry(
        "capture_cmd",
        "Record q per token at every norm of a local model (offline), with the live eps.",
    ),
    "compare": Entry(
        "compare_cmd",
        "What another eps, placement, precision or input scale does to every input.",
    ),
    "defaults": Entry("defaults_cmd", "Default eps of each framework's RMSNorm, with its source."),
    "merge": Entry(
        "merge_cmd",
        "Merge per-shard summaries into exactly the report of the concatenated data.",
    ),
    "parity": Entry(
        "parity_cmd",
        "Check an implementation's outputs on probes; infer its eps; write a record.",
    ),
    "precision": Entry(
        "precision_cmd", "eps as stored in float16/bfloat16/float32, absorption, range of q."
    ),
    "probe": Entry(
        "probe_cmd", "Write probe inputs where eps matters, with float64 reference outputs."
    ),
    "ratio": Entry(
        "ratio_cmd", "Per layer, the inputs whose q/eps is below the bound (the CI gate)."
    ),
    "sensitivity": Entry(
        "sensitivity_cmd",
        "What an eps change does to a model's next-token predictions, per norm.",
    ),
    "config": Entry(
        "config_cmd", "Show or diff model normalization configs (YAML, HF config.json, GGUF)."
    ),
}


def short_help(name: str) -> str:
    """The one-line help of command ``name`` (its ``short_help``)."""
    return COMMANDS[name].help
