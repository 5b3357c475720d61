"""The acceptance record: the parity document as YAML, JSON or Markdown, chosen by suffix.

Deterministic: the same probes and outputs give the same bytes (no timestamp unless one is
passed), so a record can be committed and diffed.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.parity.api import ParityResult

__all__ = ["RECORD_SUFFIXES", "record_format", "render_record", "write_record"]

RECORD_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".md": "md"}


def record_format(path: str | os.PathLike[str]) -> str:
    """'yaml', 'json' or 'md' from the file's suffix."""
    suffix = Path(path).suffix.lower()
    if suffix not in RECORD_SUFFIXES:
        raise InvalidParameterError(
            f"record file {str(path)!r} must end in .yaml, .yml, .json or .md"
        )
    return RECORD_SUFFIXES[suffix]


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|")


def _eps_text(inf: dict[str, Any]) -> str:
    if not isinstance(inf["eps"], float):
        return "not inferred"
    text = f"{inf['eps']:.6g}"
    if isinstance(inf["rel_uncertainty"], float):
        text += f" +- {inf['rel_uncertainty']:.2g} relative (1 sigma)"
    return text


def _markdown(doc: dict[str, Any]) -> str:
    inf, rule = doc["inference"], doc["error_rule"]
    lines = [
        f"# {'LayerNorm' if doc.get('norm') == 'layer' else 'RMSNorm'} parity record: "
        f"{doc['verdict'].upper()}",
        "",
        f"{doc['diagnosis']}",
        "",
        "| field | value |",
        "|---|---|",
    ]
    fields = [
        ("norm", "LayerNorm (layer)" if doc.get("norm") == "layer" else "RMSNorm (rms)"),
        ("dimension", doc["dimension"]),
        ("normalization axis", doc["normalization_axis"]),
        ("input dtype", doc["input_dtype"]),
        ("gain dtype", doc["gain_dtype"]),
        ("gain", f"{doc['gain']} (convention {doc['gain_convention']})"),
        ("output dtype", doc["output_dtype"]),
        ("configured eps", repr(doc["configured_eps"])),
        ("inferred eps", _eps_text(inf)),
        ("placement", doc["placement"] + (f" ({inf['note']})" if inf["note"] else "")),
        (
            "gain finding",
            f"{inf['gain']['finding']} (median channel factor "
            f"{_num(inf['gain']['median_factor'])})",
        ),
        ("reference", doc["reference"]),
        (
            "error rule",
            f"{rule['rule']}: {rule['formula']}; atol {rule['atol']!r}, "
            f"rtol {rule['rtol']!r} ({rule['thresholds_from']})",
        ),
        ("nonfinite", rule["nonfinite"]),
        (
            "probes",
            f"{doc['probes']['source']} (seed {doc['probes']['seed']}, "
            f"{doc['probes']['rows']} rows, sha256 {doc['probes']['sha256'] or '-'})",
        ),
        (
            "implementation",
            f"{doc['implementation']['source']} (sha256 {doc['implementation']['sha256'] or '-'})",
        ),
        ("tool", f"rmsnorm-eps {doc['version']}"),
    ]
    if "generated_at" in doc:
        fields.append(("generated at", doc["generated_at"]))
    lines += [f"| {k} | {_cell(v)} |" for k, v in fields]
    lines += [
        "",
        "| category | rows | failing | max abs error | max rel error | min atol | min rtol "
        "| nonfinite | result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in doc["categories"]:
        lines.append(
            f"| {c['name']} | {c['rows']} | {c['failing']}/{c['elements']} | "
            f"{_num(c['max_abs_error'])} | {_num(c['max_rel_error'])} | {_num(c['min_atol'])} | "
            f"{_num(c['min_rtol'])} | {c['nan'] + c['inf']} | "
            f"{'pass' if c['passed'] else 'FAIL'} |"
        )
    return "\n".join(lines) + "\n"


def render_record(result: ParityResult, fmt: str, timestamp: str | None = None) -> str:
    """The record text in ``fmt`` ('yaml', 'json' or 'md')."""
    from rmsnorm_eps.reports.commands.parity import parity_document

    doc = parity_document(result, timestamp)
    if fmt == "json":
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if fmt == "yaml":
        import yaml

        text: str = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
        return text
    if fmt == "md":
        return _markdown(doc)
    raise InvalidParameterError(f"unknown record format {fmt!r}")


def write_record(
    result: ParityResult, path: str | os.PathLike[str], timestamp: str | None = None
) -> None:
    """Write the record atomically, in the format its suffix names."""
    from rmsnorm_eps.atomic import atomic_write_text

    text = render_record(result, record_format(path), timestamp)
    _check_fifo(Path(path))
    atomic_write_text(path, text)


def _check_fifo(target: Path) -> None:
    """A FIFO is written in place; without a reader, opening it would wait forever. Open it
    without blocking first: ENXIO means nobody reads it, which is an error, not a hang."""
    try:
        if not stat.S_ISFIFO(os.stat(target).st_mode):
            return
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise InputFileError(target, "is a FIFO with no reader; not waiting for one") from None
        raise InputFileError(target, f"cannot write: {exc.strerror or exc}") from None
    os.close(fd)
