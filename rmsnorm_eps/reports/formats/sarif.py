"""SARIF 2.1.0 reporter (OASIS Static Analysis Results Interchange Format), e.g. for GitHub
code scanning (``github/codeql-action/upload-sarif``).

One run; ``tool.driver.rules`` lists the command's rules with their ids; each failed check is
a result with ``ruleId``, ``level`` (``error``, or ``warning`` within the gate's budget), a
message, and a location: the dump file as the physical location and the subject (layer) as a
logical location. The unrounded numbers go in the result's ``properties``. Passing checks are
not results. No timestamps: the document is deterministic.
"""

from __future__ import annotations

from pathlib import PurePath, PureWindowsPath
from typing import Any
from urllib.parse import quote

from rmsnorm_eps._version import __version__
from rmsnorm_eps.jsonvalues import jnum
from rmsnorm_eps.reports.checks import CheckReport

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "artifact_uri", "render_checks", "sarif_document"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)


def artifact_uri(path: str) -> str:
    """A path as a SARIF artifact URI: relative paths stay relative (resolved against the
    repository root by consumers), absolute ones become ``file://`` URIs; percent-encoded as
    UTF-8, and a byte that was not UTF-8 (a lone surrogate from ``surrogateescape``) as that
    byte, so ``dump-\\xff.npz`` is ``dump-%FF.npz``."""

    def enc(text: str) -> str:
        return quote(text, errors="surrogateescape")

    if PureWindowsPath(path).drive:
        return "file:///" + enc(PureWindowsPath(path).as_posix())
    p = PurePath(path)
    posix = p.as_posix()
    if p.is_absolute():
        return "file://" + enc(posix)
    return enc(posix)


def _number(value: Any) -> Any:
    return jnum(value) if isinstance(value, float) else value


def sarif_document(report: CheckReport) -> dict[str, Any]:
    """The SARIF log as a dict."""
    rule_index = {r.id: i for i, r in enumerate(report.rules)}
    results = []
    for chk in report.failed:
        source = report.source_of(chk)
        location: dict[str, Any] = {
            "logicalLocations": [
                {
                    "name": chk.name,
                    "fullyQualifiedName": f"{source}/{chk.name}" if source else chk.name,
                    "kind": "object",
                }
            ],
        }
        if source is not None:
            location["physicalLocation"] = {"artifactLocation": {"uri": artifact_uri(source)}}
        results.append(
            {
                "ruleId": chk.rule,
                "ruleIndex": rule_index[chk.rule],
                "kind": "fail",
                "level": chk.level,
                "message": {"text": chk.message},
                "locations": [location],
                "partialFingerprints": {"rmsnormEps/v1": f"{chk.rule}:{chk.name}"},
                "properties": {k: _number(v) for k, v in chk.numbers.items()},
            }
        )
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "rmsnorm-eps",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [
                    {
                        "id": r.id,
                        "name": r.name,
                        "shortDescription": {"text": r.description},
                        "defaultConfiguration": {"level": r.level},
                    }
                    for r in report.rules
                ],
            }
        },
        "automationDetails": {"id": f"rmsnorm-eps/{report.command}/"},
        "invocations": [
            {
                "executionSuccessful": True,
                "properties": {
                    "passed": report.passed,
                    "verdict": report.verdict,
                    "counts": report.counts,
                },
            }
        ],
        "results": results,
    }
    if report.sources:
        run["artifacts"] = [{"location": {"uri": artifact_uri(s)}} for s in report.sources]
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def render_checks(report: CheckReport) -> str:
    """The SARIF log, indented, keys in a fixed order."""
    from rmsnorm_eps.reports.formats.json import render_document

    return render_document(sarif_document(report))  # json.dumps's text, in bounded pieces
