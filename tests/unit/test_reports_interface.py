"""reports/interface.py: the formats a reporter serves follow from the roles it implements,
a role left abstract makes the reporter impossible to make, and every role reads its
presentation options from ``self.options``."""

from __future__ import annotations

import pytest

from rmsnorm_eps.gate import GateResult
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.interface import (
    ChecksRole,
    DocumentRole,
    MarkdownRole,
    Reporter,
    TextRole,
    formats_of,
)
from rmsnorm_eps.reports.options import CHECK_FORMATS, Format, RenderOptions


class _R:
    command = "fake"


class _Text(Reporter, TextRole[_R]):
    def text(self, result: _R) -> str:
        return f"width {self.options.width}\n"


class _Doc(Reporter, DocumentRole[_R]):
    def document(self, result: _R) -> dict[str, object]:
        gate = self.options.gate
        return {"passed": None if gate is None else gate.passed}


class _Md(Reporter, MarkdownRole[_R]):
    def markdown(self, result: _R) -> str:
        return "# own\n"


class _Checks(Reporter, ChecksRole[_R]):
    def checks(self, result: _R) -> CheckReport:
        return CheckReport("fake", "t", None, "thing", (), (), True, "ok")


class _TextDoc(_Text, DocumentRole[_R]):
    def document(self, result: _R) -> dict[str, object]:
        return {}


class _Missing(Reporter, TextRole[_R], DocumentRole[_R]):
    def text(self, result: _R) -> str:
        return ""


@pytest.mark.parametrize(
    ("cls", "formats"),
    [
        (Reporter, set()),
        (_Text, {Format.TEXT}),
        (_Doc, {Format.JSON}),
        (_Md, {Format.MARKDOWN}),
        (_Checks, set(CHECK_FORMATS)),
        (_TextDoc, {Format.TEXT, Format.JSON}),
    ],
)
def test_formats_follow_the_roles(cls: type[Reporter], formats: set[Format]) -> None:
    assert formats_of(cls) == formats
    assert isinstance(formats_of(cls), frozenset)


def test_a_role_left_abstract_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="document"):
        _Missing()  # type: ignore[abstract]


def test_roles_read_the_options_they_were_made_with() -> None:
    assert Reporter().options == RenderOptions()
    assert _Text(RenderOptions(width=37)).text(_R()) == "width 37\n"
    assert _Text().text(_R()) == "width None\n"
    gate = GateResult(False, 1, 0.5, None, None, "1 violation(s), none allowed")
    assert _Doc(RenderOptions(gate=gate)).document(_R()) == {"passed": False}
    assert _Doc().document(_R()) == {"passed": None}
