"""Size caps of the config readers: peak RSS <= 256 MiB on any config.json, YAML or GGUF, and
error lines bounded whatever the file holds (issue 12 item 5)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_eps.config import load_config
from rmsnorm_eps.config.gguf_reader import MAX_KV
from rmsnorm_eps.config.json_file import MAX_JSON_BYTES
from rmsnorm_eps.config.yaml_reader import MAX_YAML_BYTES, MAX_YAML_NODES
from rmsnorm_eps.errors import InputFileError

ROOT = Path(__file__).resolve().parents[1]
PEAK_LIMIT_KIB = 256 * 1024

#: load_config in a fresh process; prints its own VmHWM (ru_maxrss of a child would include
#: this test process's peak, which survives fork and exec) and the error, if any.
_SCRIPT = (
    "import sys\n"
    "from rmsnorm_eps.config import load_config\n"
    "from rmsnorm_eps.errors import RmsnormEpsError\n"
    "try:\n"
    "    c = load_config(sys.argv[1]); c.resolved_entries(); msg = 'ok'\n"
    "except RmsnormEpsError as exc:\n"
    "    msg = str(exc)\n"
    "status = open('/proc/self/status').read()\n"
    "print(next(x.split()[1] for x in status.splitlines() if x.startswith('VmHWM:')))\n"
    "print(len(msg)); print(msg[:300])\n"
)


def _run(path: Path) -> tuple[int, int, str]:
    """(peak KiB, message length, message head)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    peak, length, head = out.stdout.split("\n", 2)
    return int(peak), int(length), head.strip()


def _gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _gguf(path: Path, kv: list[tuple[bytes, bytes]]) -> Path:
    """A GGUF v3 header with the given (key, raw string value) pairs and no tensors."""
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv) + 2))
        fh.write(_gguf_string(b"general.architecture") + struct.pack("<I", 8))
        fh.write(_gguf_string(b"llama"))
        fh.write(_gguf_string(b"llama.attention.layer_norm_rms_epsilon"))
        fh.write(struct.pack("<If", 6, 1e-5))
        for key, value in kv:
            fh.write(_gguf_string(key) + struct.pack("<I", 8) + _gguf_string(value))
    return path


def _cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, expected message start or 'ok'), each at or over its cap."""
    cases: dict[str, tuple[Path, str]] = {}
    n = MAX_JSON_BYTES - 64
    p = tmp / "dicts.json"  # the costliest JSON per byte: empty objects
    p.write_text('{"model_type": "llama", "x": [' + ",".join(["{}"] * (n // 3 - 20)) + "]}")
    cases["json objects at the cap"] = (p, "ok")
    p = tmp / "keys.json"  # 3M keys took 533 MiB before the cap
    p.write_text("{" + ",".join(f'"k{i}":0' for i in range(3_000_000)) + "}")
    cases["json 3M keys"] = (p, "JSON config larger than")
    p = tmp / "flow.yaml"  # the costliest YAML per node: empty flow mappings
    p.write_text("schema_version: 1\nmodel: [" + ",".join(["{}"] * (MAX_YAML_NODES - 10)) + "]\n")
    cases["yaml nodes at the cap"] = (p, "expected a string")
    p = tmp / "many.yaml"
    p.write_text("schema_version: 1\nmodel: [" + ",".join(["a"] * (MAX_YAML_BYTES // 2)) + "]\n")
    cases["yaml over the cap"] = (p, "YAML config larger than")
    kv = [(b"k.%07d" % i, b"v" * 1000) for i in range(MAX_KV - 2)]
    cases["gguf keys at the cap"] = (_gguf(tmp / "keys.gguf", kv), "ok")
    kv = [(b"big.%d" % i, b"x" * (60 << 20)) for i in range(4)]
    cases["gguf 240 MiB of strings"] = (_gguf(tmp / "strings.gguf", kv), "ok")
    kv = [(b"k.%d" % i, b"") for i in range(MAX_KV + 1)]
    cases["gguf over the key cap"] = (_gguf(tmp / "over.gguf", kv), "truncated or malformed")
    return cases


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_peak_rss_bounded_on_every_config_kind(tmp_path: Path) -> None:
    for name, (path, expected) in _cases(tmp_path).items():
        peak, length, head = _run(path)
        assert peak < PEAK_LIMIT_KIB, f"{name}: peak {peak} KiB"
        assert length < 1000, f"{name}: error of {length} characters"
        if expected == "ok":
            assert head == "ok", f"{name}: {head}"
        else:
            assert expected in head, f"{name}: {head}"
        path.unlink()


def test_json_duplicate_key_refused(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "rms_norm_eps": 1e-6, "rms_norm_eps": 1e-2}')
    with pytest.raises(InputFileError, match=r"config.json \[rms_norm_eps\]: duplicate key"):
        load_config(p)
    p.write_text('{"model_type": "llama", "text_config": {"a": 1, "a": 2}}')
    with pytest.raises(InputFileError, match=r"duplicate key"):
        load_config(p)


def test_long_key_error_is_bounded(tmp_path: Path) -> None:
    key = "k" * 1_000_000
    p = tmp_path / "config.json"
    p.write_text(f'{{"{key}": 1, "{key}": 2}}')
    with pytest.raises(InputFileError) as info:
        load_config(p)
    assert len(str(info.value)) < 600
    y = tmp_path / "c.yaml"
    y.write_text(f'schema_version: 1\nlayers:\n  "{key}": {{eps: -1}}\n')
    with pytest.raises(InputFileError) as info:
        load_config(y)
    assert len(str(info.value)) < 600
