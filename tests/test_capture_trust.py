"""Capture's trust checks on a tiny random Llama saved as a model directory (no download): a
checkpoint that lacks weights or holds unexpected ones, config eps values, model sizes capped
against the weights present, texts capped in tokens, and outputs inside the model folder."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _copy(model_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "model"
    shutil.copytree(model_dir, d)
    return d


def _edit_weights(d: Path, drop: str = "", add: dict[str, Any] | None = None) -> None:
    """Rewrite model.safetensors without the tensors whose name holds ``drop``, plus ``add``."""
    path = d / "model.safetensors"
    weights = safetensors_torch.load_file(str(path))
    kept = {k: v for k, v in weights.items() if not (drop and drop in k)}
    kept.update(add or {})
    safetensors_torch.save_file(kept, str(path), metadata={"format": "pt"})


def _edit_config(d: Path, **changes: Any) -> None:
    path = d / "config.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def _run(cli: Callable[..., Any], d: Path, tmp_path: Path, *extra: str) -> Any:
    return cli(
        "capture", "--model", str(d), "--text", "the quick fox", "--save-data",
        str(tmp_path / "q.npz"), *extra,
    )  # fmt: skip


def test_a_checkpoint_without_layer_1_is_refused_naming_the_tensors(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_weights(d, drop=".layers.1.")
    r = _run(cli, d, tmp_path)
    assert r.exit_code == 2, r
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "9 missing ('model.layers.1.input_layernorm.weight'" in line
    assert "and 5 more" in line and "--allow-random-weights" in line
    assert not (tmp_path / "q.npz").exists()
    r = _run(cli, d, tmp_path, "--allow-random-weights")
    assert r.exit_code == 0, r
    assert "warning: 9 weight(s) of the model are not in the checkpoint (or of" in r.stderr
    assert "model.layers.1.input_layernorm.weight" in r.stderr
    assert "newly initialized at random" in r.stderr  # transformers' word, never swallowed


def test_an_unexpected_tensor_is_refused(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_weights(d, add={"model.layers.0.extra\x1b.weight": torch.zeros(3)})
    r = _run(cli, d, tmp_path)
    assert r.exit_code == 2, r
    assert "1 unexpected ('model.layers.0.extra\\x1b.weight')" in r.stderr
    assert "\x1b" not in r.stderr


def test_a_vision_sub_model_the_text_model_has_no_module_for_is_a_note_not_a_refusal(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    """A vision-language checkpoint loaded as its text model (the tiny Llama's config, with a
    vision tower and projector beside the text weights): those tensors lie outside every
    module the model runs, so they are named, not refused; a tensor under the model's own
    modules still is."""
    d = _copy(model_dir, tmp_path)
    vision = {
        "vision_tower.encoder.layers.0.layer_norm1.weight": torch.ones(4),
        "vision_tower.encoder.layers.0.mlp.fc1.weight": torch.zeros(8, 4),
        "multi_modal_projector.linear_1.weight": torch.zeros(16, 4),
        "image\x1bnewline": torch.zeros(16),
    }
    _edit_weights(d, add=vision)
    r = _run(cli, d, tmp_path)
    assert r.exit_code == 0, r  # was: 4 unexpected ... refused
    assert (
        "note: 4 tensor(s) of the checkpoint belong to sub-models LlamaForCausalLM has no "
        "module for and were not loaded: 'image\\x1bnewline' (1), 'multi_modal_projector' "
        "(1), 'vision_tower' (2); nothing the model runs reads them"
    ) in r.stderr
    assert "\x1b" not in r.stderr and (tmp_path / "q.npz").is_file()
    _edit_weights(d, add={"model.layers.1.self_attn.extra.weight": torch.zeros(3)})
    r = _run(cli, d, tmp_path)
    assert r.exit_code == 2, r
    assert "1 unexpected ('model.layers.1.self_attn.extra.weight')" in r.stderr
    assert "vision_tower" not in r.stderr


def test_sensitivity_names_the_sub_models_it_did_not_load(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_weights(d, add={"vision_model.post_layernorm.weight": torch.ones(4)})
    r = cli("sensitivity", "--model", str(d), "--text", "the quick fox", "--eps", "1e-3")
    assert r.exit_code == 0, r
    assert (
        "note: 1 tensor(s) of the checkpoint belong to sub-models LlamaForCausalLM has no "
        "module for and were not loaded: 'vision_model' (1)"
    ) in r.stderr


def test_a_tensor_of_another_shape_than_the_config_says_is_refused_by_name(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_config(d, intermediate_size=48)  # the weights hold 64
    r = _run(cli, d, tmp_path)
    assert r.exit_code == 2, r  # was transformers' RuntimeError: "internal error"
    assert "6 of another shape ('model.layers.0.mlp.down_proj.weight'" in r.stderr
    assert "internal error" not in r.stderr


def test_sensitivity_refuses_the_same_checkpoint(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_weights(d, drop=".layers.1.")
    r = cli("sensitivity", "--model", str(d), "--text", "the quick fox", "--eps", "1e-3")
    assert r.exit_code == 2, r
    assert "9 missing" in r.stderr and "Traceback" not in r.stderr
    # it has no --allow-random-weights (a verdict on random weights is another model's), and
    # its refusal must not tell the user to give one
    assert "give --allow-random-weights" not in r.stderr
    assert r.stderr.strip().endswith(
        "(only capture takes --allow-random-weights: a sensitivity verdict on random weights "
        "would be about another model)"
    )
    r = cli("sensitivity", "--model", str(d), "--text", "x", "--eps", "1e-3",
            "--allow-random-weights")  # fmt: skip
    assert r.exit_code == 2 and "--allow-random-weights" in r.stderr


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"1e-5"', "the eps is str '1e-5': expected a number > 0"),
        ("NaN", "the eps is nan: expected a finite number > 0"),
        ("Infinity", "the eps is inf: expected a finite number > 0"),
        ("0", "the eps is 0: expected a finite number > 0"),
        ("-1e-6", "the eps is -1e-06: expected a finite number > 0"),
        ("null", "the eps is null: expected a number > 0"),
    ],
)
def test_a_bad_config_eps_is_one_line_naming_file_and_key(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path, value: str, problem: str
) -> None:
    d = _copy(model_dir, tmp_path)
    text = (d / "config.json").read_text()
    doc = json.loads(text)
    doc["rms_norm_eps"] = "@@"
    (d / "config.json").write_text(json.dumps(doc).replace('"@@"', value))
    for command in ("capture", "sensitivity"):
        extra = (
            ["--save-data", str(tmp_path / "q.npz")] if command == "capture" else ["--eps", "1e-3"]
        )
        r = cli(command, "--model", str(d), "--text", "the quick fox", *extra)
        assert r.exit_code == 2, r
        assert r.stderr.strip() == (
            f"rmsnorm-eps: error: {d / 'config.json'} [rms_norm_eps]: {problem}"
        ), r.stderr


def test_a_billion_layers_with_one_layer_of_weights_is_refused_before_building(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    import resource
    import time

    d = _copy(model_dir, tmp_path)
    _edit_weights(d, drop=".layers.1.")
    _edit_config(d, num_hidden_layers=10**9)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    for command in ("capture", "sensitivity"):
        extra = ["--save-data", str(tmp_path / "q.npz")] if command == "capture" else ["--eps", "1"]
        r = cli(command, "--model", str(d), "--text", "the quick fox", *extra)
        assert r.exit_code == 2, r
        assert r.stderr.strip() == (
            f"rmsnorm-eps: error: {d / 'config.json'} [num_hidden_layers]: 1000000000 layers, "
            "but the checkpoint holds 12 tensor(s): a model this deep cannot come from these "
            "weights"
        )
    assert time.perf_counter() - start < 30
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 << 10  # the constructor would take gigabytes


def test_a_width_far_beyond_every_tensor_is_refused(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_config(d, hidden_size=1 << 30)
    r = _run(cli, d, tmp_path)
    assert r.exit_code == 2, r
    assert "[hidden_size]: 1073741824 is too large a size for these weights; " in r.stderr
    assert "the widest tensor of the checkpoint has 64" in r.stderr


def test_one_text_of_a_million_characters_is_refused_in_tokens_quickly(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    import time

    from rmsnorm_eps.capture.inputs import MAX_TEXT_CHARS, MAX_TEXT_TOKENS

    text = tmp_path / "t.txt"
    text.write_text(("the quick fox " * (MAX_TEXT_CHARS // 14))[: MAX_TEXT_CHARS - 1] + "\n")
    start = time.perf_counter()
    r = cli(
        "capture", "--model", str(model_dir), "--text-file", str(text), "--save-data",
        str(tmp_path / "q.npz"),
    )  # fmt: skip
    assert r.exit_code == 2, r
    assert time.perf_counter() - start < 60
    assert f"over the {MAX_TEXT_TOKENS} a capture runs per text: give --max-tokens N" in r.stderr
    r = cli(
        "sensitivity", "--model", str(model_dir), "--text-file", str(text), "--eps", "1e-3",
    )  # fmt: skip
    assert r.exit_code == 2 and "give --max-tokens N" in r.stderr, r
    r = cli(
        "capture", "--model", str(model_dir), "--text-file", str(text), "--max-tokens", "16",
        "--save-data", str(tmp_path / "q.npz"),
    )  # fmt: skip
    assert r.exit_code == 0, r  # truncated to 16 tokens: within the cap


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("--save-data", "tokenizer.json"),  # absent here: the next load would read it
        ("--save-data", "sub/s.json"),
        ("--config-out", "chat_template.jinja"),
        ("-o", "adapter_model.safetensors"),
    ],
)
def test_an_output_inside_the_model_folder_is_refused(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path, option: str, name: str
) -> None:
    d = _copy(model_dir, tmp_path)
    (d / "tokenizer.json").unlink(missing_ok=True)
    (d / "sub").mkdir()
    link = tmp_path / "link"
    link.symlink_to(d)
    before = sorted(p.name for p in d.rglob("*"))
    args = ["--save-data", str(tmp_path / "q.npz")] if option != "--save-data" else []
    args += ["--summary-only"] if name.endswith(".json") else []
    r = cli(
        "capture", "--model", str(d), "--text", "the quick fox", *args, option,
        str(link / name),
    )  # fmt: skip
    assert r.exit_code == 2, r
    assert f"lies inside the model folder --model {d}: refusing to write a file" in r.stderr
    assert sorted(p.name for p in d.rglob("*")) == before


def test_a_dump_beside_the_model_files_is_written(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    r = cli("capture", "--model", str(d), "--text", "the fox", "--save-data", str(d / "q.npz"))
    assert r.exit_code == 0, r  # .npz: never a model file
    assert (d / "q.npz").is_file()


def test_widths_that_would_allocate_gigabytes_of_random_weights_are_refused(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    d = _copy(model_dir, tmp_path)
    _edit_config(d, hidden_size=16384, intermediate_size=16384, head_dim=4096)  # within the caps
    r = _run(cli, d, tmp_path, "--allow-random-weights")
    assert r.exit_code == 2, r  # about 2.7e9 parameters: 11 GB in float32
    assert "config.json builds a model of" in r.stderr
    assert "but the checkpoint holds 22688 values: most of the model would be random" in r.stderr


@pytest.mark.slow
def test_a_gguf_whose_block_count_far_exceeds_its_tensors_is_refused(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    gguf = pytest.importorskip("gguf")
    from tests.conftest import smollm2_dir

    d = tmp_path / "g"
    d.mkdir()
    shutil.copy(Path(smollm2_dir()) / "SmolLM2-135M-Instruct.Q4_1.gguf", d / "m.gguf")
    reader = gguf.GGUFReader(str(d / "m.gguf"), "r+")
    field = reader.get_field("llama.block_count")
    field.parts[field.data[0]][0] = 10**9  # in place, as gguf's gguf_set_metadata does
    del reader
    r = cli(
        "capture", "--model", str(d), "--gguf", "m.gguf", "--text", "Hello", "--save-data",
        str(tmp_path / "q.npz"),
    )  # fmt: skip
    assert r.exit_code == 2, r
    assert r.stderr.strip() == (
        f"rmsnorm-eps: error: {d / 'm.gguf'} [num_hidden_layers]: 1000000000 layers, but the "
        "checkpoint holds 272 tensor(s): a model this deep cannot come from these weights"
    )
