"""``defaults`` reports: the eps each framework's RMSNorm uses by default, with its rule and
source: the document and the text (one value and its explanation, or a table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmsnorm_eps.jsonvalues import head as _head
from rmsnorm_eps.reports.interface import DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.config.defaults import DefaultsResult

__all__ = ["PIPE_WIDTH", "DefaultsReporter"]


#: Width of the text report off a terminal (a pipe, a file): a stable layout for scripts and
#: docs, whatever the environment says.
PIPE_WIDTH = 80


def _wrap(first: str, body: str, width: int, indent: str) -> list[str]:
    """``first`` + ``body`` wrapped at ``width``, continuation lines indented by ``indent``;
    words (paths, ``>=``, version ranges) are never split."""
    import textwrap

    return textwrap.wrap(
        body,
        width=max(width, len(indent) + 20),
        initial_indent=first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


class DefaultsReporter(Reporter, TextRole["DefaultsResult"], DocumentRole["DefaultsResult"]):
    """``defaults``: text and json."""

    def text(self, result: DefaultsResult) -> str:
        """One resolved number (first line, alone: ``defaults --framework hf-llama | head -1``)
        and its explanation, or one record per row: ``name: api``, then its eps, rule, versions
        and source, each wrapped at the terminal's width (:data:`PIPE_WIDTH` off a terminal)."""
        width = self.options.width or PIPE_WIDTH
        if len(result.rows) == 1 and result.rows[0].eps is not None:
            x = result.rows[0]
            body = f"{x.row.api}: {x.explanation} [source: {x.row.source}]"
            return "\n".join([f"{x.eps:.8g}", *_wrap("", body, width, "  ")]) + "\n"
        records: list[str] = []
        for x in result.rows:
            eps = f"{x.eps:.8g}" if x.eps is not None else "-"
            rule = x.explanation if x.row.framework == "torch" else x.row.rule
            lines = _wrap("", f"{x.row.name}: {x.row.api}", width, "  ")
            for label, value in (
                ("eps", eps),
                ("rule", rule),
                ("versions", x.row.versions),
                ("source", x.row.source),
            ):
                lines += _wrap(f"  {label:<9}", value, width, " " * 11)
            records.append("\n".join(lines))
        return "\n\n".join(records) + "\n"

    def document(self, result: DefaultsResult) -> dict[str, object]:
        doc = _head("defaults")
        doc.update(
            {
                "framework": result.framework,
                "dtype": result.dtype,
                "torch_version": result.torch_version,
                "rows": [
                    {
                        "name": x.row.name,
                        "framework": x.row.framework,
                        "api": x.row.api,
                        "eps": x.eps,
                        "explanation": x.explanation,
                        "table_eps": x.row.eps,
                        "rule": x.row.rule,
                        "versions": x.row.versions,
                        "source": x.row.source,
                    }
                    for x in result.rows
                ],
            }
        )
        return doc
