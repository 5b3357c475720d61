"""The summary file format (``ratio --save-summary``, ``capture --summary-only``): a thin
envelope around the layers of :mod:`rmsnorm_eps.layer_record`.

A summary is a versioned JSON document: a head (``source``, ``raw``), the layers (each the
ratio JSON layer without its derived figures: :func:`~rmsnorm_eps.layer_record.summary_layer`,
unrounded numbers and multi-dimensional indices) and a tail (``delta``, ``min_ratio``,
``top_k``). Reading checks the envelope here (:data:`TOP_FIELDS`, :data:`TAIL_FIELDS`: rows of
``(key, check)``; ``min_ratio`` must be the one ``delta`` gives, recomputed, not trusted) and
each layer with :func:`~rmsnorm_eps.layer_record.read_layer` (structure and consistency).
Duplicate JSON keys are refused (a reader taking the last one and a reader taking the first
would merge different figures).

Memory: a file over :data:`MAX_SUMMARY_BYTES` (4 MiB) is refused before it is read. The parsed
JSON costs up to about 35 bytes per byte of text on hostile inputs (small containers such as
``[{"a":[]},...]``, measured), so 4 MiB keeps a whole run under about 160 MiB peak RSS (159 MiB
measured); a real summary holds a few KB per layer at the default ``--top 5`` (a 160-layer
capture summary with positions: about 0.4 MB).

Version 3 (this one): each layer says what its figures are of, ``"quantity": "q"`` (mean(x^2))
or ``"v"`` (a LayerNorm's variance); version 2 did not, so ``merge`` reported a LayerNorm's v as
q, and a version 2 file is refused with one line saying to write it again. Since version 2, zero
vectors (q = 0 exactly) are counted in ``zero`` only: ``below_bound`` counts the positive finite
q below the bound, ``worst`` lists the smallest positive q, and ``min_pos_q`` is the smallest
positive finite q (``min_q`` stays the true minimum). Version 1 counted zeros in
``below_bound`` and listed them in ``worst``; its worst list cannot be turned into a later
version's (the positive inputs it crowded out are lost), so it is refused the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmsnorm_eps._version import __version__
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.layer_record import (
    LayerResult,
    Reader,
    Table,
    boolean,
    bounded,
    integer,
    number,
    read_layer,
    read_table,
    shown,
    string,
    summary_layer,
)

if TYPE_CHECKING:
    from rmsnorm_eps.analysis import RatioReport

__all__ = [
    "MAX_SUMMARY_BYTES",
    "SUMMARY_SCHEMA",
    "SUMMARY_VERSION",
    "ShardSummary",
    "load_summary",
    "parse_summary_json",
    "summary_document",
    "summary_from_document",
    "write_summary",
]

SUMMARY_SCHEMA = "rmsnorm-eps-summary"
SUMMARY_VERSION = 3
#: Larger summary files are refused before they are read (see the module docstring).
MAX_SUMMARY_BYTES = 4 << 20


# --------------------------------------------------------------------------- writing


def summary_document(report: RatioReport) -> dict[str, Any]:
    """The versioned summary of a report (what ``--save-summary`` writes)."""
    return {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "source": report.source,
        "raw": report.raw,
        "delta": report.delta,
        "min_ratio": report.min_ratio,
        "top_k": report.top_k,
        "tie_rule": "q/eps == min_ratio passes; violation when q/eps < min_ratio",
        "zero_rule": "q == 0 is counted in zero, not in below_bound nor in worst",
        "layers": [summary_layer(layer) for layer in report.layers],
    }


def write_summary(report: RatioReport, path: str | os.PathLike[str]) -> None:
    """Write :func:`summary_document` as JSON, atomically. Names are hostile: the JSON is
    ASCII (controls and surrogates as ``\\uXXXX``) and :func:`rmsnorm_eps.escape.json_text`
    writes a ``#`` before a ``#`` as ``\\u0023``, so a runner ``cat``-ing the file reads no
    workflow command; it parses back to the exact names."""
    from rmsnorm_eps.atomic import atomic_write_text
    from rmsnorm_eps.escape import json_text

    text = json_text(json.dumps(summary_document(report), indent=1, allow_nan=False)) + "\n"
    atomic_write_text(Path(path), text)


# --------------------------------------------------------------------------- the loaded form


@dataclass(frozen=True)
class ShardSummary:
    """A loaded summary file."""

    path: Path
    source: str
    raw: bool
    delta: float
    min_ratio: float
    top_k: int
    layers: tuple[LayerResult, ...]


# --------------------------------------------------------------------------- reading

_positive = bounded(number, lambda x: x > 0.0, "expected a number > 0")

#: The document's head (after ``schema`` and ``schema_version``).
TOP_FIELDS: Table = (("raw", boolean), ("source", string))
#: The document's tail (after the layers).
TAIL_FIELDS: Table = (
    ("delta", bounded(number, lambda x: 0.0 < x < 1.0, "expected a number in (0, 1)")),
    ("min_ratio", _positive),
    ("top_k", integer()),
)


def _check_schema(r: Reader, doc: Any) -> None:
    if not isinstance(doc, dict) or doc.get("schema") != SUMMARY_SCHEMA:
        raise r.fail("schema", f"not an rmsnorm-eps summary (expected {SUMMARY_SCHEMA!r})")
    version = doc.get("schema_version")
    if version == 2:
        raise r.fail(
            "schema_version",
            "summary version 2 does not say whether a layer holds q or a LayerNorm's v (merge "
            "reported v as q); write it again with this rmsnorm-eps (it reads version "
            f"{SUMMARY_VERSION})",
        )
    if version == 1:
        raise r.fail(
            "schema_version",
            "summary version 1 counts q = 0 as below the bound and lists zeros as the worst "
            f"inputs; write it again with this rmsnorm-eps (it reads version {SUMMARY_VERSION})",
        )
    if version != SUMMARY_VERSION:
        raise r.fail(
            "schema_version",
            f"unsupported summary version {version!r} "
            f"(this rmsnorm-eps reads version {SUMMARY_VERSION})",
        )


def summary_from_document(doc: Any, path: str | os.PathLike[str]) -> ShardSummary:
    """Validate a parsed summary document; ``path`` names it in errors and in merged reports
    (a file, or a label such as ``rank1`` for summaries gathered in memory)."""
    p = Path(path)
    r = Reader(p)
    _check_schema(r, doc)
    head = read_table(r, doc, TOP_FIELDS, "")
    layers_doc = r.get(doc, "layers", "")
    if not isinstance(layers_doc, list) or not layers_doc:
        raise r.fail("layers", "expected a non-empty list")
    tail = read_table(r, doc, TAIL_FIELDS, "")
    _check_bound_agrees(r, tail["delta"], tail["min_ratio"])
    r.min_ratio, r.top_k = tail["min_ratio"], tail["top_k"]
    layers = tuple(read_layer(r, ld, f"layers[{i}].") for i, ld in enumerate(layers_doc))
    return ShardSummary(path=p, **head, **tail, layers=layers)


def _check_bound_agrees(r: Reader, delta: float, ratio: float) -> None:
    """``min_ratio`` must be the ratio ``delta`` gives, or the one ``delta`` was computed from
    (``--min-ratio``): a summary claiming a bound its ``delta`` contradicts is refused."""
    from rmsnorm_eps import numerics

    if (
        float(numerics.min_ratio(delta)) != ratio
        and float(numerics.attenuation_loss(ratio)) != delta
    ):
        raise r.fail(
            "min_ratio",
            f"min_ratio {ratio!r} contradicts delta {delta!r} (which gives "
            f"{float(numerics.min_ratio(delta))!r})",
        )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a JSON object whose keys repeat is refused."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {shown(key)}")
    return out


def parse_summary_json(text: str | bytes) -> Any:
    """The JSON of a summary: NaN/Infinity constants and duplicate keys refused (ValueError)."""
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (the summary writes them as strings): refuse them."""
    raise ValueError(f"{name} is not valid JSON")


def load_summary(path: str | os.PathLike[str]) -> ShardSummary:
    """Read and validate a summary written by ``ratio --save-summary`` or
    ``capture --summary-only`` (at most :data:`MAX_SUMMARY_BYTES`)."""
    from rmsnorm_eps.sources.sniff import check_regular_file

    p = Path(path)
    size = check_regular_file(p)
    if size > MAX_SUMMARY_BYTES:
        raise InputFileError(
            p,
            f"summary too large ({size} bytes; the limit is {MAX_SUMMARY_BYTES >> 20} MiB, "
            "about a thousand layers at --top 5)",
        )
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_SUMMARY_BYTES + 1)
        if len(data) > MAX_SUMMARY_BYTES:  # grew since it was measured
            raise InputFileError(p, f"summary too large (over {MAX_SUMMARY_BYTES >> 20} MiB)")
        doc = parse_summary_json(data.decode("utf-8"))
    except RecursionError:
        raise InputFileError(p, "not a JSON summary (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputFileError(p, f"not a JSON summary ({exc})") from None
    del data
    return summary_from_document(doc, p)
