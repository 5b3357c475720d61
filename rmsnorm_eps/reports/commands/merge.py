"""``merge`` reports: a merged report is a ratio report of shards (``RatioReport.shards``), so
it is rendered as ``ratio`` is, with ``command: "merge"``, the shards, and each worst input's
shard and index there (see :mod:`rmsnorm_eps.reports.commands.ratio`)."""

from __future__ import annotations

from rmsnorm_eps.reports.commands.ratio import FORMATS, checks, document, text

__all__ = ["FORMATS", "checks", "document", "text"]
