"""reports/table.py: the plain table writer's layout (widths, alignment, header rule, terminal
cells of wide characters) and the fitting rule for names (shared prefix, middle shortening
that keeps distinct names distinct)."""

from __future__ import annotations

from rmsnorm_eps.reports.table import (
    ELLIPSIS,
    MIN_NAME,
    Column,
    cells,
    common_prefix,
    ellipsize,
    fit_names,
    shorten_names,
    table_lines,
)


def test_layout_by_hand() -> None:
    lines = table_lines(
        [Column("layer"), Column("q", "right"), Column("two\nlines", "center")],
        [("a", "1", "x"), ("bbb", "1e-05", "yy")],
        title="T",
    )
    assert lines == [
        "T",
        "                       ",
        "                  two  ",
        " layer       q   lines ",
        " ───────────────────── ",
        " a           1     x   ",
        " bbb     1e-05    yy   ",
        "                       ",
    ]


def test_wide_characters_take_two_cells() -> None:
    assert cells("abc") == 3 and cells("漢字") == 4
    lines = table_lines([Column("n"), Column("v", "right")], [("漢字", "1"), ("ab", "22")])
    assert lines[3] == " 漢字    1 " and lines[4] == " ab     22 "
    assert len({cells(line) for line in lines}) == 1


def test_without_header_there_is_no_rule() -> None:
    lines = table_lines([Column("what"), Column("v", "right")], [("x", "1")], show_header=False)
    assert lines == ["       ", " x   1 ", "       "]


def test_common_prefix_ends_at_a_separator_and_leaves_something() -> None:
    assert common_prefix(["model.layers.0.norm", "model.layers.1.norm"]) == "model.layers."
    assert common_prefix(["a/b/c", "a/b/d", "a/e"]) == "a/"
    assert common_prefix(["x.y", "x.y.z"]) == "x."  # "x.y." would leave nothing of "x.y"
    assert common_prefix(["same", "same"]) == ""  # one distinct name
    assert common_prefix(["abc1", "abc2"]) == ""  # no separator


def test_ellipsize_keeps_both_ends_within_the_width() -> None:
    assert ellipsize("short", 10) == "short"
    out = ellipsize("model.layers.31.post_attention_layernorm", 16)
    assert cells(out) == 16 and ELLIPSIS in out
    assert out == "model.l" + ELLIPSIS + "ayernorm"  # 7 cells, the ellipsis, 8 cells
    assert cells(ellipsize("漢字漢字漢字漢字", 7)) <= 7


def test_shortened_names_stay_distinct() -> None:
    names = [f"model.layers.{i}.post_attention_layernorm" for i in range(30)]
    shown = shorten_names(names, 16)
    assert len(set(shown.values())) == 30
    assert all(cells(s) <= 17 for s in shown.values())


def test_fit_names_drops_the_prefix_then_shortens() -> None:
    names = [f"model.layers.{i}.input_layernorm" for i in range(3)]

    def measure(shown: dict[str, str]) -> int:
        return max(cells(s) for s in shown.values()) + 20  # 20 cells of other columns

    fit = fit_names(names, "layer", measure, 40, "layers")
    assert fit.fits and fit.lead == ("layers under model.layers.",)
    assert fit.shown[names[0]] == "0.input_layernorm"
    tight = fit_names(names, "layer", measure, 20 + MIN_NAME, "layers")
    assert tight.fits and all(cells(s) <= MIN_NAME for s in tight.shown.values())
    hopeless = fit_names(names, "layer", measure, 20 + MIN_NAME - 1, "layers")
    assert not hopeless.fits  # the name column would be narrower than MIN_NAME
