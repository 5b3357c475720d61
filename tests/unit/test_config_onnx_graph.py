"""config/onnx_graph.py: reading a model file under its caps, walking the main graph, If
branches and functions, naming each norm once, and the NormConfig with its findings; models
built here with onnx.helper and saved to tmp_path."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config import onnx_graph  # noqa: E402
from rmsnorm_eps.config.onnx_graph import (  # noqa: E402
    escape_glob,
    find_norms,
    load_onnx_model,
    onnx_findings,
    read_onnx_config,
)
from rmsnorm_eps.errors import InputFileError  # noqa: E402

D = 4


def _rms(name: str, eps: float | None, x: str = "x", y: str = "y") -> Any:
    attrs: dict[str, Any] = {} if eps is None else {"epsilon": eps}
    return helper.make_node("RMSNormalization", [x, "w"], [y], name=name, **attrs)


def _model(nodes: list[Any], *, functions: tuple[Any, ...] = (), name: str = "tiny") -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])
    w = numpy_helper.from_array(np.ones(D, np.float32), "w")
    graph = helper.make_graph(nodes, name, [x], [y], [w])
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("local", 1)],
        functions=list(functions),
        producer_name="hand",
        producer_version="1.0",
    )


def _save(model: Any, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def test_escape_glob_matches_only_the_name_itself() -> None:
    name = "model.layers[0].norm*?"
    pattern = escape_glob(name)
    assert pattern == "model.layers[[]0].norm[*][?]"
    assert fnmatch.fnmatchcase(name, pattern)
    assert not fnmatch.fnmatchcase("model.layers0.normXY", pattern)
    assert escape_glob("plain.name") == "plain.name"


def test_load_refuses_empty_missing_unparseable_and_graphless_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(InputFileError, match="empty file") as info:
        load_onnx_model(empty)
    assert info.value.path == str(empty)
    with pytest.raises(InputFileError, match="no such file"):
        load_onnx_model(tmp_path / "absent.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(InputFileError, match="not a readable ONNX model") as info:
        load_onnx_model(junk)
    assert "\n" not in str(info.value) and str(junk) in str(info.value)
    bare = _save(onnx.ModelProto(ir_version=8), tmp_path / "bare.onnx")
    with pytest.raises(InputFileError, match=r"no ir_version or no graph"):
        load_onnx_model(bare)


def test_load_refuses_a_file_over_the_size_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save(_model([_rms("n", 1e-6)]), tmp_path / "m.onnx")
    size = path.stat().st_size
    monkeypatch.setattr(onnx_graph, "MAX_ONNX_BYTES", size)
    assert load_onnx_model(path).graph.name == "tiny"  # at the cap: read
    monkeypatch.setattr(onnx_graph, "MAX_ONNX_BYTES", size - 1)
    with pytest.raises(InputFileError, match=f"{size} bytes: over the {size - 1}-byte limit"):
        load_onnx_model(path)


def test_norms_in_if_branches_and_functions_are_found_and_named_once(tmp_path: Path) -> None:
    then_g = helper.make_graph(
        [_rms("same", 1e-6, y="t")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, D])],
    )
    else_g = helper.make_graph(
        [_rms("same", 1e-5, y="e")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, D])],
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    fn = helper.make_function(
        "local",
        "Norm",
        ["a", "w"],
        ["b"],
        [_rms("inner", 1e-4, x="a", y="b")],
        [helper.make_opsetid("", 23)],
    )
    nodes = [
        helper.make_node("Constant", [], ["c"], name="k", value=cond),
        helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Norm", ["x", "w"], ["z"], name="call", domain="local"),
    ]
    model = _model(nodes, functions=(fn,))
    path = tmp_path / "m.onnx"
    norms = find_norms(model, path)
    # (onnx.helper stores a node's attributes sorted by name: else_branch first)
    assert [(n.name, n.eps, n.graph) for n in norms] == [
        ("same", float(np.float32(1e-5)), "graph/If 'branch'.else_branch"),
        ("same#2", float(np.float32(1e-6)), "graph/If 'branch'.then_branch"),
        ("function local.Norm/inner", float(np.float32(1e-4)), "function local.Norm"),
    ]


def test_the_node_cap_and_the_depth_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = ["x", "y0", "y1", "y"]  # three norms in a row, each live
    model = _model([_rms(f"n{i}", 1e-6, x=chain[i], y=chain[i + 1]) for i in range(3)])
    path = tmp_path / "m.onnx"
    monkeypatch.setattr(onnx_graph, "MAX_NODES", 3)
    assert len(find_norms(model, path)) == 3  # at the cap
    monkeypatch.setattr(onnx_graph, "MAX_NODES", 2)
    with pytest.raises(InputFileError, match="over 2 nodes") as info:
        find_norms(model, path)
    assert info.value.path == str(path)
    monkeypatch.setattr(onnx_graph, "MAX_NODES", 1 << 20)
    monkeypatch.setattr(onnx_graph, "MAX_DEPTH", 0)
    inner = helper.make_graph([], "b", [], [])
    nested = _model([helper.make_node("If", ["x"], ["y"], then_branch=inner, else_branch=inner)])
    with pytest.raises(InputFileError, match="subgraphs nested deeper than 0"):
        find_norms(nested, path)


def test_read_onnx_config_has_one_escaped_entry_per_norm_and_the_findings(
    tmp_path: Path,
) -> None:
    nodes = [
        _rms("/m/layers.0/norm/N", 1e-6, y="a"),
        _rms("/m/layers.1/norm/N", 1e-6, x="a", y="b"),
        _rms("/m/layers.2/norm/N", 1e-5, x="b", y="c"),
        helper.make_node("LpNormalization", ["c"], ["y"], name="/m/odd[x]/Lp", p=2),
    ]
    path = _save(_model(nodes), tmp_path / "m.onnx")
    config = read_onnx_config(path)
    assert config.kind == "onnx" and config.model == "tiny" and config.path == str(path)
    assert config.source == "ONNX graph (producer hand 1.0)"
    assert [e.pattern for e in config.entries] == [
        "m.layers.0.norm",
        "m.layers.1.norm",
        "m.layers.2.norm",
        "m.odd[[]x]",
    ]
    assert config.notes[0].startswith("4 normalization(s) found; opsets ai.onnx 23, local 1")
    findings = onnx_findings(config)
    assert len(findings) == 2
    assert findings[0] == "FINDING m.odd[x]: LpNormalization has no epsilon"
    assert findings[1].startswith("FINDING m.layers.2.norm: eps 9.99999974")
    assert "unlike its 2 rms sibling(s)" in findings[1]
    empty = read_onnx_config(_save(_model([helper.make_node("Relu", ["x"], ["y"])]), path))
    assert empty.entries == () and onnx_findings(empty) == (
        "FINDING no normalization found in the graph",
    )
