"""One glob semantics for every command: fnmatchcase, indexed; config diff on resolved settings."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps.config import diff_configs, eps_for_layers, globs, load_config
from rmsnorm_eps.config.globs import GlobIndex, compile_glob, match_tokens, witness
from rmsnorm_eps.config.yaml_reader import MAX_YAML_PATTERNS
from rmsnorm_eps.errors import InputFileError

GLOB_CHARS = "ab.*?[]!-0"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.text(GLOB_CHARS, max_size=8), min_size=1, max_size=12),
    st.lists(st.text("ab.-]![0", max_size=8), min_size=1, max_size=12),
)
def test_index_equals_fnmatchcase(patterns: list[str], names: list[str]) -> None:
    index = GlobIndex.build(patterns)
    for name in names:
        want = tuple(i for i, p in enumerate(patterns) if fnmatch.fnmatchcase(name, p))
        assert index.matches(name) == want, (patterns, name)
        for p in patterns:
            assert match_tokens(compile_glob(p), name) == fnmatch.fnmatchcase(name, p), (p, name)


@settings(max_examples=300, deadline=None)
@given(st.text(GLOB_CHARS, max_size=10))
def test_witness_matches_its_pattern(pattern: str) -> None:
    name = witness(pattern)
    if name is not None:
        assert fnmatch.fnmatchcase(name, pattern)


def test_case_sensitive_and_star_crosses_dots() -> None:
    index = GlobIndex.build(["*.q_norm", "Model.*", "model.layers.[0-9].x"])
    assert index.matches("model.layers.3.self_attn.q_norm") == (0,)
    assert index.matches("model.layers.3.x") == (2,)
    assert index.matches("model.layers.3.X") == ()
    assert index.matches("model.a") == ()


def _yaml(path: Path, eps: str) -> Path:
    path.write_text(
        "schema_version: 1\n"
        "defaults: {eps: 1e-6, placement: inside, gain: w, norm: rms}\n"
        "layers:\n"
        f'  "model.layers.[0-9].input_layernorm": {{eps: {eps}}}\n',
        encoding="utf-8",
    )
    return path


def test_bracket_glob_same_in_show_diff_and_ratio(tmp_path: Path) -> None:
    """Issue 12: [0-9] globs were EQUIVALENT in diff and showed the defaults in show."""
    a = load_config(_yaml(tmp_path / "a.yaml", "1e-6"))
    b = load_config(_yaml(tmp_path / "b.yaml", "1e-2"))
    shown = dict(b.resolved_entries())["model.layers.[0-9].input_layernorm"]
    assert shown.eps.value == 1e-2
    used = eps_for_layers(b, ["model.layers.7.input_layernorm"]).eps
    assert used == {"model.layers.7.input_layernorm": 1e-2}
    d = diff_configs(a, b)
    assert not d.equivalent
    assert [x.field for x in d.significant] == ["eps"]
    assert d.significant[0].patterns == ("model.layers.[0-9].input_layernorm",)


def _cfg(tmp_path: Path, name: str, layers: str) -> Path:
    p = tmp_path / name
    p.write_text(
        "schema_version: 1\ndefaults: {eps: 1e-5, placement: inside, gain: w, norm: rms}\n"
        "layers:\n" + layers,
        encoding="utf-8",
    )
    return p


def test_diff_order_of_overlapping_globs_is_not_equivalent(tmp_path: Path) -> None:
    """x* then *y differs from *y then x* only on names like xy: no witness shows it, the
    normal form does."""
    a = load_config(_cfg(tmp_path, "a.yaml", '  "x*": {eps: 1e-6}\n  "*y": {eps: 1e-2}\n'))
    b = load_config(_cfg(tmp_path, "b.yaml", '  "*y": {eps: 1e-2}\n  "x*": {eps: 1e-6}\n'))
    assert a.settings_for("xy").eps.value != b.settings_for("xy").eps.value  # type: ignore[union-attr]
    d = diff_configs(a, b)
    assert not d.equivalent
    assert d.significant[0].patterns == ("xy",)  # joined from the witnesses of x* and *y
    assert (d.significant[0].a.value, d.significant[0].b.value) == (1e-2, 1e-6)


def test_diff_not_proven_when_no_name_is_found(tmp_path: Path) -> None:
    """[ab] equals [a] plus [b]; the normal forms differ and no tried name shows a difference:
    not proven equal, so DIFFERENT (a gate never says EQUIVALENT without proof)."""
    a = load_config(_cfg(tmp_path, "a.yaml", '  "x[ab]": {eps: 1e-6}\n'))
    b = load_config(_cfg(tmp_path, "b.yaml", '  "xa": {eps: 1e-6}\n  "xb": {eps: 1e-6}\n'))
    d = diff_configs(a, b)
    assert not d.equivalent
    assert "not proven equal" in d.significant[0].a.provenance.note


def test_diff_equivalent_spellings(tmp_path: Path) -> None:
    """An entry equal to what applies anyway and a "*" restating the default change nothing."""
    a = load_config(_cfg(tmp_path, "a.yaml", '  "*": {}\n  "*.q_norm": {eps: 1e-6}\n'))
    b = load_config(
        _cfg(
            tmp_path,
            "b.yaml",
            '  "*": {eps: 1e-5}\n  "*.k_norm": {eps: 1e-5}\n  "*.q_norm": {eps: 1e-6}\n',
        )
    )
    assert diff_configs(a, b).equivalent
    c = load_config(_cfg(tmp_path, "c.yaml", '  "*": {}\n  "*.q_norm": {eps: 2e-6}\n'))
    assert not diff_configs(a, c).equivalent


def _big_yaml(path: Path, n: int) -> Path:
    shapes = (
        "model.layers.{i}.input_layernorm",
        "model.layers.{i}.*",
        "model.layers.[0-9]{i}.x",
        "*.{i}.q_norm",
        "model.*.{i}.k_norm",
    )
    lines = ["schema_version: 1", "defaults: {eps: 1e-6, placement: inside, gain: w, norm: rms}"]
    lines.append("layers:")
    for i in range(n):
        lines.append(f'  "{shapes[i % len(shapes)].format(i=i)}": {{eps: {1 + i % 7}e-6}}')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_globs_at_the_cap_cost_a_few_matches_per_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12 item 5: 16,000 globs took 156 s in config show (each glob tried on each name).
    At the pattern cap (4,096 globs, 4,096 names) show, ratio's lookup and diff each try a few
    globs per name (counted), where trying each glob on each name would be 16.8 million."""
    n = MAX_YAML_PATTERNS
    path = _big_yaml(tmp_path / "big.yaml", n)
    calls = [0]
    match = globs.match_tokens

    def counted(tokens: tuple[object, ...], name: str) -> bool:
        calls[0] += 1
        return match(tokens, name)  # type: ignore[arg-type]

    monkeypatch.setattr(globs, "match_tokens", counted)
    config = load_config(path)
    shown = config.resolved_entries()
    show_calls, calls[0] = calls[0], 0
    names = [f"model.layers.{i}.q_norm" for i in range(n)]
    eps = eps_for_layers(config, names, fallback=1.0, allow_unmatched=True).eps
    ratio_calls, calls[0] = calls[0], 0
    diff = diff_configs(config, config)
    assert len(shown) == n and diff.equivalent
    assert eps["model.layers.3.q_norm"] == 4e-6  # "*.3.q_norm" (i=3)
    assert eps["model.layers.1.q_norm"] == 2e-6  # "model.layers.1.*"
    assert eps["model.layers.2.q_norm"] == 1.0  # no pattern: the fallback
    assert 0 < show_calls <= 2 * n and 0 < ratio_calls <= 2 * n and 0 < calls[0] <= 4 * n


def test_yaml_merge_key_refused(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(
        "schema_version: 1\nbase: &b {eps: 1e-2}\ndefaults:\n  <<: *b\n  placement: inside\n",
        encoding="utf-8",
    )
    with pytest.raises(InputFileError, match=r"merge key <<"):
        load_config(p)
