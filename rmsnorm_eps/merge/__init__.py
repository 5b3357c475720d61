"""Mergeable summaries: analyse each shard of a dump where it lives, combine the reports exactly.

* :mod:`rmsnorm_eps.merge.summary_format`: the summary file (writing, and the table-driven
  validator that reads it back, with its size cap);
* :mod:`rmsnorm_eps.merge.combine`: the merge algorithm (:func:`merge_summaries`,
  :func:`merge_reports`; why the latter keeps a JSON round trip is written at its top).
"""

from rmsnorm_eps.merge.combine import merge_reports, merge_summaries
from rmsnorm_eps.merge.summary_format import (
    MAX_SUMMARY_BYTES,
    SUMMARY_SCHEMA,
    SUMMARY_VERSION,
    ShardSummary,
    load_summary,
    summary_document,
    summary_from_document,
    write_summary,
)

__all__ = [
    "MAX_SUMMARY_BYTES",
    "SUMMARY_SCHEMA",
    "SUMMARY_VERSION",
    "ShardSummary",
    "load_summary",
    "merge_reports",
    "merge_summaries",
    "summary_document",
    "summary_from_document",
    "write_summary",
]
