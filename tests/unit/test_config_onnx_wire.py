"""config/onnx_wire.py: the model read by positioned reads (a file truncated while read is one
error line, exit 2, never a SIGBUS), and the config readers' parse without the values of large
initializers (a big inline weight is never held: peak memory measured in a fresh process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config import onnx_wire  # noqa: E402
from rmsnorm_eps.config.onnx_graph import (  # noqa: E402
    CONFIG_STRIP_BYTES,
    load_onnx_model,
    read_onnx_config,
)

ROOT = Path(__file__).resolve().parents[2]
D = 4


def _big_model(path: Path, big_elements: int) -> Path:
    """One RMSNormalization (eps 1e-5, w of D elements) and an unused float32 initializer
    ``emb`` of ``big_elements`` elements stored inline (raw_data), before the graph outputs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])
    w = numpy_helper.from_array(np.full(D, 0.5, np.float32), "w")
    emb = numpy_helper.from_array(np.arange(big_elements, dtype=np.float32), "emb")
    node = helper.make_node("RMSNormalization", ["x", "w"], ["y"], name="norm", epsilon=1e-5)
    graph = helper.make_graph([node], "big", [x], [y], [w, emb])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    onnx.save(model, str(path))
    return path


#: Cut the file to its first 4 KiB when the wire walk starts, then read on: a mapped reader
#: died of SIGBUS here (exit -7, nothing on stderr); the CLI's one error line is printed instead.
_TRUNCATE_DURING_READ = """
import os, sys
from rmsnorm_eps.config import onnx_wire
path = sys.argv[1]
real = onnx_wire._fields
def cut_then_walk(*args):
    if os.path.getsize(path) > 4096:
        os.truncate(path, 4096)
    return real(*args)
onnx_wire._fields = cut_then_walk
from rmsnorm_eps.cli import main
sys.argv = ["rmsnorm-eps", *sys.argv[2:], path]
main()
"""


@pytest.mark.parametrize("command", [["config", "show"], ["parity", "onnx"]])
def test_an_onnx_file_truncated_while_read_is_one_error_line_exit_2(
    tmp_path: Path, command: list[str]
) -> None:
    pytest.importorskip("onnxruntime")
    path = _big_model(tmp_path / "m.onnx", 1 << 20)  # 4 MiB: past the first window
    out = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_DURING_READ, str(path), *command],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2, (out.returncode, out.stderr)  # a SIGBUS death is -7
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"rmsnorm-eps: error: {path}: file changed while being read: ")
    assert os.path.getsize(path) == 4096  # the cut did happen during the read


def test_a_window_smaller_than_the_fields_reads_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big_model(tmp_path / "m.onnx", 20_000)
    whole = load_onnx_model(path)
    monkeypatch.setattr(onnx_wire, "WINDOW_BYTES", 7)  # every field straddles a window end
    assert load_onnx_model(path) == whole
    assert onnx_wire.count_nodes(path, 10) == 1


def test_the_config_parse_keeps_dims_and_small_constants_not_large_values(
    tmp_path: Path,
) -> None:
    path = _big_model(tmp_path / "m.onnx", 1 << 16)  # 256 KiB: over CONFIG_STRIP_BYTES
    whole = load_onnx_model(path)
    lean = load_onnx_model(path, CONFIG_STRIP_BYTES)
    big = {t.name: t for t in lean.graph.initializer}
    assert list(big["emb"].dims) == [1 << 16] and big["emb"].data_type == TensorProto.FLOAT
    assert big["emb"].raw_data == b""  # the values were left out
    assert big["w"] == next(t for t in whole.graph.initializer if t.name == "w")
    assert lean.graph.node == whole.graph.node and lean.graph.output == whole.graph.output
    config = read_onnx_config(path)
    entry = config.entries[0]
    assert entry.pattern == "norm"
    assert dict(entry.overrides)["eps"].value == pytest.approx(1e-5)


#: Peak RSS of reading the config of the model in argv[1], over the peak after the imports.
_PEAK = """
import resource, sys
from pathlib import Path
import onnx, numpy
from rmsnorm_eps.config.onnx_graph import read_onnx_config
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
read_onnx_config(Path(sys.argv[1]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_a_large_inline_initializer_is_not_held_by_the_config_reader(tmp_path: Path) -> None:
    path = _big_model(tmp_path / "m.onnx", 16 << 20)  # 64 MiB inline
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    grown_mib = int(out.stdout) / 1024  # ru_maxrss is in KiB on Linux
    assert grown_mib < 16, grown_mib  # whole: the file's bytes and the parsed copy, 128+ MiB
