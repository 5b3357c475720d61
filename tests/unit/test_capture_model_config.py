"""capture/model_config.py: a ``config.json`` whose sizes are not integers >= 1 (at any depth
up to 4), that repeats a key, is not JSON or is too large is refused with one line naming the
file and key; a directory without one is left alone; a build error becomes one CaptureError
line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.model_config import SIZE_KEYS, check_model_config, model_build_error
from rmsnorm_eps.errors import InputFileError


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    return tmp_path


def test_valid_and_missing_configs_pass(tmp_path: Path) -> None:
    check_model_config(tmp_path)  # no config.json: a GGUF directory
    doc = {
        "hidden_size": 32,
        "num_attention_heads": 4,
        "head_dim": None,
        "text_config": {"vocab_size": 10},
    }
    check_model_config(_write(tmp_path, json.dumps(doc)))
    assert {"hidden_size", "num_attention_heads", "vocab_size", "d_model"} <= SIZE_KEYS


@pytest.mark.parametrize("value", [0, -3, 2.0, "32", True])
def test_bad_size_named_with_its_key(tmp_path: Path, value: object) -> None:
    d = _write(tmp_path, json.dumps({"num_attention_heads": value}))
    with pytest.raises(InputFileError, match="is not a size: expected an integer >= 1") as info:
        check_model_config(d)
    assert info.value.key == "num_attention_heads"
    assert "config.json [num_attention_heads]" in str(info.value)


def test_nested_key_path_and_depth_limit(tmp_path: Path) -> None:
    d = _write(tmp_path, json.dumps({"text_config": {"encoder": {"d_model": 0}}}))
    with pytest.raises(InputFileError) as info:
        check_model_config(d)
    assert info.value.key == "text_config.encoder.d_model"
    # deeper than 4 levels of nesting: not looked at
    deep: dict[str, object] = {"hidden_size": 0}
    for i in range(6):
        deep = {f"l{i}": deep}
    check_model_config(_write(tmp_path, json.dumps(deep)))
    shallow: dict[str, object] = {"hidden_size": 0}
    for i in range(4):
        shallow = {f"l{i}": shallow}
    with pytest.raises(InputFileError, match=r"l3\.l2\.l1\.l0\.hidden_size"):
        check_model_config(_write(tmp_path, json.dumps(shallow)))


def test_duplicate_key_not_json_and_too_large(tmp_path: Path) -> None:
    d = _write(tmp_path, '{"hidden_size": 32, "hidden_size": 0}')
    with pytest.raises(
        InputFileError, match=r"not a JSON model config .*duplicate key 'hidden_size'"
    ):
        check_model_config(d)
    with pytest.raises(InputFileError, match="not a JSON model config"):
        check_model_config(_write(tmp_path, "{hidden_size: 3"))
    (tmp_path / "config.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputFileError, match="not a JSON model config"):
        check_model_config(tmp_path)
    (tmp_path / "config.json").write_bytes(b" " * ((1 << 20) + 1))
    with pytest.raises(InputFileError, match="over 1 MiB: not a model config"):
        check_model_config(tmp_path)


def test_model_build_error_is_one_bounded_line(tmp_path: Path) -> None:
    err = model_build_error(tmp_path, ZeroDivisionError("integer division\n  or modulo by zero"))
    assert isinstance(err, CaptureError)
    text = str(err)
    assert "\n" not in text
    assert text == (
        f"{tmp_path}: the model cannot be built from its config.json "
        "(ZeroDivisionError: integer division or modulo by zero)"
    )
    long = str(model_build_error(tmp_path, ValueError("x" * 500)))
    assert "x" * 200 in long and "x" * 201 not in long
    assert str(model_build_error(tmp_path, KeyError())).endswith("(KeyError: KeyError)")


def test_a_per_layer_intermediate_size_list_is_a_size(tmp_path: Path) -> None:
    """Gemma 3n's config.json stores one intermediate_size per layer; each entry is checked."""
    check_model_config(
        _write(tmp_path, json.dumps({"text_config": {"intermediate_size": [8, 16]}}))
    )
    with pytest.raises(InputFileError, match="is not a size") as info:
        check_model_config(_write(tmp_path, json.dumps({"intermediate_size": [8, 0]})))
    assert info.value.key == "intermediate_size[1]"
    with pytest.raises(InputFileError, match="empty per-layer list") as info:
        check_model_config(_write(tmp_path, json.dumps({"intermediate_size": []})))
    with pytest.raises(InputFileError, match="is not a size"):  # only intermediate_size
        check_model_config(_write(tmp_path, json.dumps({"num_hidden_layers": [2]})))


def test_sizes_are_capped_by_the_weights_present() -> None:
    from rmsnorm_eps.capture.checkpoint import WeightsPresent
    from rmsnorm_eps.capture.model_config import MAX_LAYERS, WIDTH_FLOOR, check_sizes

    path = Path("m/config.json")
    present = WeightsPresent(tensors=12, largest_dim=64, files=("model.safetensors",))
    check_sizes(path, [("num_hidden_layers", "num_hidden_layers", 12)], present)
    check_sizes(path, [("hidden_size", "hidden_size", WIDTH_FLOOR)], present)  # the floor
    check_sizes(path, [("num_experts", "num_experts", 64)], present)  # one axis per expert
    cases = [
        ("num_decoder_layers", 13, "13 layers, but the checkpoint holds 12 tensor(s)"),
        ("text_config.num_layers", 10**9, "1000000000 layers, but the checkpoint holds 12"),
        ("intermediate_size", WIDTH_FLOOR + 1, "too large a size for these weights"),
        ("num_local_experts", 65, "65 experts, but the checkpoint holds 12 tensor(s)"),
    ]
    for name, value, message in cases:
        with pytest.raises(InputFileError, match=re.escape(message)) as info:
            check_sizes(path, [(name, name.rpartition(".")[2], value)], present)
        assert info.value.key == name
    with pytest.raises(InputFileError, match=f"over the {MAX_LAYERS} a capture builds"):
        check_sizes(path, [("n_layer", "n_layer", MAX_LAYERS + 1)], None)  # no safetensors


def test_a_missing_pooler_and_a_head_do_not_count_for_an_encoder() -> None:
    torch = pytest.importorskip("torch")
    from rmsnorm_eps.capture.checkpoint import unmatched_weights

    model = torch.nn.Module()
    model.encoder = torch.nn.Linear(2, 2)
    model.pooler = torch.nn.Linear(2, 2)
    info = {
        "missing_keys": {"pooler.weight", "pooler.bias"},
        "unexpected_keys": {"cls.predictions.bias", "encoder.extra"},
        "mismatched_keys": [],
    }
    assert unmatched_weights(info, model, "encoder") == {
        "missing": [],
        "unexpected": ["encoder.extra"],
        "mismatched": [],
    }
    assert unmatched_weights(info, model, "causal") == {  # cls.* is outside: a note there
        "missing": ["pooler.bias", "pooler.weight"],
        "unexpected": ["encoder.extra"],
        "mismatched": [],
    }
