"""``defaults`` reports: the eps each framework's RMSNorm uses by default, with its rule and
source: the document and the text (one value and its explanation, or a table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.reports.document import head as _head
from rmsnorm_eps.reports.interface import DocumentRole, Reporter, TextRole
from rmsnorm_eps.reports.options import RenderOptions

if TYPE_CHECKING:
    from rmsnorm_eps.config.defaults import DefaultsResult

__all__ = ["document", "text"]


def document(r: DefaultsResult) -> dict[str, Any]:
    doc = _head("defaults")
    doc.update(
        {
            "framework": r.framework,
            "dtype": r.dtype,
            "torch_version": r.torch_version,
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
                for x in r.rows
            ],
        }
    )
    return doc


def text(r: DefaultsResult, options: RenderOptions) -> str:
    from rich import box
    from rich.table import Table

    from rmsnorm_eps.reports.formats.text import render_renderables

    if len(r.rows) == 1 and r.rows[0].eps is not None:
        x = r.rows[0]
        return f"{x.eps:.8g}\n{x.row.api}: {x.explanation} [source: {x.row.source}]\n"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("api", ratio=3)
    table.add_column("eps", justify="right", no_wrap=True)
    table.add_column("rule (versions) [source]", overflow="fold", ratio=5)
    for x in r.rows:
        eps = f"{x.eps:.8g}" if x.eps is not None else "-"
        rule = x.explanation if x.row.framework == "torch" else x.row.rule
        table.add_row(x.row.name, x.row.api, eps, f"{rule} ({x.row.versions}) [{x.row.source}]")
    return render_renderables([table], options)


class DefaultsReporter(Reporter, TextRole["DefaultsResult"], DocumentRole["DefaultsResult"]):
    """``defaults``: text and json."""

    def text(self, result: DefaultsResult) -> str:
        return text(result, self.options)

    def document(self, result: DefaultsResult) -> dict[str, object]:
        return document(result)
