"""rmsnorm_eps.config.defaults_table: every row has a framework, an API, an eps or a rule, and
a public source."""

from __future__ import annotations

from rmsnorm_eps.config.defaults_table import FRAMEWORK_DEFAULTS


def test_rows() -> None:
    assert {r.framework for r in FRAMEWORK_DEFAULTS} >= {"torch"}
    names = [r.name for r in FRAMEWORK_DEFAULTS]
    assert len(names) == len(set(names))
    for row in FRAMEWORK_DEFAULTS:
        assert row.api and row.source, row
        assert (row.eps is not None and 0 < row.eps < 1) or row.rule, row
