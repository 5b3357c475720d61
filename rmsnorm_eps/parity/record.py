"""The acceptance record: the parity document as YAML, JSON or Markdown, chosen by suffix.

Deterministic: the same probes and outputs give the same bytes (no timestamp unless one is
passed), so a record can be committed and diffed.

Names in the record (category names from the probe file, file paths) are hostile, and a CI
step may ``cat`` the record: JSON goes through :func:`rmsnorm_eps.escape.json_text`; YAML
writes any string :func:`rmsnorm_eps.escape.visible` would change double-quoted, with every
character outside printable ASCII, and the ``:`` of ``::`` and ``#`` of ``##``, as a YAML
escape (``\\x3a``, ``\\x23``, ``\\uNNNN``), so it loads back to the exact string; Markdown
uses :func:`rmsnorm_eps.escape.markdown`. No line of any record holds ``::`` at its start,
``##[`` or ``##vso[`` from data.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.escape import json_text, markdown, no_ci_command, visible
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
        markdown(doc["diagnosis"]),
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
    lines += [f"| {k} | {markdown(v)} |" for k, v in fields]
    lines += [
        "",
        "| category | rows | failing | max abs error | max rel error | min atol | min rtol "
        "| nonfinite | result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in doc["categories"]:
        lines.append(
            f"| {markdown(c['name'])} | {c['rows']} | {c['failing']}/{c['elements']} | "
            f"{_num(c['max_abs_error'])} | {_num(c['max_rel_error'])} | {_num(c['min_atol'])} | "
            f"{_num(c['min_rtol'])} | {c['nan'] + c['inf']} | "
            f"{'pass' if c['passed'] else 'FAIL'} |"
        )
    return no_ci_command("\n".join(lines) + "\n")


# In a double-quoted YAML scalar: the quote, the backslash, anything outside printable ASCII,
# and the first character of `::` and `##`.
_YAML_ESCAPE = re.compile(r'["\\]|[^\x20-\x7e]|:(?=:)|#(?=#)')


def _yaml_char(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in '"\\':
        return "\\" + ch
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _yaml_dump(doc: dict[str, Any]) -> str:
    """``doc`` as block YAML; hostile strings double-quoted with visible escapes (module
    docstring), on one line each."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def write_double_quoted(self, text: str, split: bool = True) -> None:
            self.write_indicator('"', True)
            data = _YAML_ESCAPE.sub(_yaml_char, text)
            self.column += len(data)
            self.stream.write(data)
            self.write_indicator('"', False)

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if visible(value) != value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    text: str = yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)
    return text


def render_record(result: ParityResult, fmt: str, timestamp: str | None = None) -> str:
    """The record text in ``fmt`` ('yaml', 'json' or 'md')."""
    from rmsnorm_eps.parity.document import parity_document

    doc = parity_document(result, timestamp)
    if fmt == "json":
        return json_text(json.dumps(doc, indent=2, allow_nan=False)) + "\n"
    if fmt == "yaml":
        return _yaml_dump(doc)
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
