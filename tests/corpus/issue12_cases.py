"""Corpus cases of issue 12 (a gate a pull request cannot subvert): hostile names in every
reader (npz members, YAML globs, config.json values, GGUF metadata strings, merge-summary
names), members that could hide data (directory entries, empty names, duplicates, overlapping
entries), glob spellings, oversize configs and summaries, and outputs that are an input under
another name (symlink, hard link). Registered into :mod:`corpus.make_corpus` on import.

tests/test_hostile_corpus.py reads every stdout and stderr line of every case as the GitHub
Actions runner does (no workflow command may come from data) and checks, after all runs, that
no input file was changed.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from corpus.make_corpus import (
    GG_STRING,
    RATIO,
    SHOW,
    case,
    gg_str,
    gguf_bytes,
    gguf_model,
    npy,
    zip_bytes,
)

#: One name per class of issue 12 (no "::" in member names: that names a companion array).
NAMES = (
    "x##[stop-commands]t",
    "##vso[task.setvariable variable=a]b",
    "##[error title=forged]PASS",
    "[/x]",
    "[link=http://e]a[/link]",
    "\x1b]8;;http://e\x07l\x1b]8;;\x07",
    "<img src=x>",
    "</details>",
    "a\nb",
    "c\rd",
    "\u2028s\u2029",
    "e\x85f",
    "bidi\u202eexe",
    "$\\frac{1}{$",
)
#: For places "::" can go (config values, GGUF strings, summary names, globs).
STRINGS = (*NAMES, "::error::x", " ::warning title=t::w", "::add-mask::secret")
FORMATS = ("json", "markdown", "github", "junit", "sarif")
_VIOLATING = np.array([1e-9, 1.0, 2.0], np.float32)
_CLEAN = np.array([1.0, 2.0], np.float32)


def _m(name: str, values: np.ndarray) -> tuple[str, bytes]:
    return name + ".npy", npy(values)


def _yaml(path: Path, layers: dict[str, float], model: str = "m") -> None:
    body = "".join(f"  {json.dumps(k)}: {{eps: {v!r}}}\n" for k, v in layers.items())
    path.write_text(
        f"schema_version: 1\nmodel: {json.dumps(model)}\ndefaults:\n  eps: 1e-5\n"
        "  placement: inside\n  gain: w\n  norm: rms\nlayers:\n" + body,
        encoding="utf-8",
    )


# --------------------------------------------------------------------------- hostile names


@case(
    "names",
    "names_members.npz",
    RATIO,
    1,
    f"in {len(NAMES)} of {len(NAMES)} layer(s)",
    json_checks=(),
    also=[
        *(((*RATIO, "--format", f), 1, "") for f in FORMATS),
        (
            ("compare", "--from", "eps=1e-6", "--to", "eps=1e-5", "--q-file", "{file}"),
            1,
            "",
        ),
        ((*RATIO, "--save-summary", "{file}.summary.json"), 1, ""),
    ],
)
def names_members(path: Path) -> None:
    path.write_bytes(zip_bytes([_m(n, _VIOLATING) for n in NAMES]))


@case(
    "names",
    "names_globs.yaml",
    SHOW,
    0,
    f"{len(STRINGS)} layer pattern(s)",
    also=[
        (("config", "show", "{file}", "--format", "json"), 0, ""),
        (("ratio", "--config", "{file}", "--q-file", "{dir}/valid_q.npz"), 2, "match no layer"),
        (("config", "diff", "{file}", "{dir}/names_globs_b.yaml"), 1, "DIFFERENT"),
        (("config", "diff", "{file}", "{dir}/names_globs_b.yaml", "-f", "github"), 1, ""),
    ],
)
def names_globs(path: Path) -> None:
    _yaml(path, dict.fromkeys(STRINGS, 1e-6), model="::error::m ##[add-mask] <h1>x</h1>\n")


@case("names", "names_globs_b.yaml", SHOW, 0, f"{len(STRINGS)} layer pattern(s)")
def names_globs_b(path: Path) -> None:
    _yaml(path, dict.fromkeys(STRINGS, 1e-2))


@case(
    "names",
    "names_config.json",
    SHOW,
    0,
    "default eps 1e-06",
    also=[(("config", "show", "{file}", "-f", "json"), 0, "")],
)
def names_config_json(path: Path) -> None:
    """model_type and _name_or_path are hostile (an unknown family: missing settings)."""
    doc = {
        "model_type": "::error::x##[add-mask]<h1>\x1b[2J",
        "rms_norm_eps": 1e-6,
        "_name_or_path": "##vso[task.complete]\n::warning::m",
    }
    path.write_text(json.dumps(doc), encoding="utf-8")


@case("names", "names_key.json", SHOW, 2, "duplicate key in a JSON object")
def names_duplicate_hostile_key(path: Path) -> None:
    key = json.dumps("::error::k##[x]\n")
    path.write_text(
        f'{{"model_type": "llama", {key}: 1, {key}: 2, "rms_norm_eps": 1e-6}}', encoding="utf-8"
    )


@case("names", "names_metadata.gguf", SHOW, 0, "default eps 9.999999747378752e-06")
def names_gguf(path: Path) -> None:
    kvs = gguf_model(
        extra=[
            ("general.description", GG_STRING, gg_str("\n".join(STRINGS))),
            ("::error::key##[x]\x1b", GG_STRING, gg_str("v")),
        ]
    )
    kvs[1] = ("general.name", GG_STRING, gg_str("##[error]forged\n::set-output name=x::y"))
    path.write_bytes(gguf_bytes(kvs))


@case("names", "names_arch.gguf", SHOW, 0, "default eps missing")
def names_gguf_architecture(path: Path) -> None:
    kvs = gguf_model()
    kvs[0] = ("general.architecture", GG_STRING, gg_str("::error::arch##[x]\x1b<h1>"))
    path.write_bytes(gguf_bytes(kvs))


@case(
    "names",
    "names_summary.json",
    ("merge", "{file}"),
    1,
    f"in {len(STRINGS)} of {len(STRINGS)} layer(s)",
    also=[(("merge", "{file}", "--format", f), 1, "") for f in FORMATS],
)
def names_summary(path: Path) -> None:
    """A merge summary whose layer names are hostile, written by the library (a dump with
    those names through ``analyze_dump`` and ``summary_document``: consistent figures); names
    with "::" cannot be .npz members (companions), so they are given in the summary only."""
    import tempfile

    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.merge import summary_document

    plain = [n for n in STRINGS if "::" not in n]
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "d.npz"
        dump.write_bytes(zip_bytes([_m(n, _VIOLATING) for n in plain]))
        doc = summary_document(analyze_dump(dump, 1e-5))
    doc["source"] = "names.npz"
    by_name = {layer["name"]: layer for layer in doc["layers"]}
    doc["layers"] = [by_name[n] for n in plain] + [
        {**by_name[plain[0]], "name": n} for n in STRINGS if "::" in n
    ]
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")


# --------------------------------------------------------------------------- accounting


@case(
    "accounting",
    "directory_entry.npz",
    RATIO,
    2,
    "member 'hidden/' is a directory entry",
    also=[((*RATIO, "--skip-unreadable"), 1, "skipped 1 unreadable layer(s): hidden/")],
)
def directory_entry(path: Path) -> None:
    """Violating data under a name ending in "/": numpy would load it; the gate must see it."""
    path.write_bytes(zip_bytes([_m("a", _CLEAN), ("hidden/", npy(_VIOLATING))]))


@case("accounting", "npy_directory_entry.npz", RATIO, 2, "member 'x.npy/' is a directory entry")
def npy_directory_entry(path: Path) -> None:
    path.write_bytes(zip_bytes([_m("a", _CLEAN), ("x.npy/", npy(_VIOLATING))]))


@case(
    "accounting",
    "empty_member_name.npz",
    RATIO,
    2,
    "member '' is not a .npy array",
    also=[((*RATIO, "--skip-unreadable"), 1, "skipped 1 unreadable layer(s)")],
)
def empty_member_name(path: Path) -> None:
    path.write_bytes(zip_bytes([_m("a", _CLEAN), ("", npy(_VIOLATING))]))


@case("accounting", "duplicate_hiding.npz", RATIO, 2, "duplicate member 'a.npy'")
def duplicate_hiding(path: Path) -> None:
    """The clean copy first, the violating one second: last-wins readers would differ."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path.write_bytes(zip_bytes([_m("a", _CLEAN), _m("a", _VIOLATING)]))


@case("accounting", "overlapping_members.npz", RATIO, 2, "its local header names 'a.npy'")
def overlapping_members(path: Path) -> None:
    """Two directory entries pointing at one local member (the second's data never read)."""
    data = zip_bytes([_m("a", _CLEAN), _m("b", _VIOLATING)])
    last = data.rfind(b"PK\x01\x02")
    path.write_bytes(data[: last + 42] + struct.pack("<L", 0) + data[last + 46 :])


# --------------------------------------------------------------------------- glob spellings


@case("globs", "bracket_glob.npz", RATIO, 0, "PASS")
def bracket_glob_dump(path: Path) -> None:
    """q/eps = 5000 at eps 1e-5 (passes), 5 at the config's 1e-2 (fails)."""
    q = np.array([0.05, 1.0], np.float32)
    path.write_bytes(zip_bytes([_m("model.layers.0.input_layernorm", q)]))


@case(
    "globs",
    "bracket_glob.yaml",
    ("ratio", "--config", "{file}", "--q-file", "{dir}/bracket_glob.npz"),
    1,
    "FAIL: 1 violation(s)",
    also=[
        (
            (
                "compare",
                "--from",
                "config",
                "--config",
                "{file}",
                "--to",
                "eps=1e-5",
                "--q-file",
                "{dir}/bracket_glob.npz",
            ),
            1,
            "",
        ),
        (("config", "diff", "{file}", "{dir}/bracket_glob_b.yaml"), 1, "DIFFERENT"),
    ],
)
def bracket_glob(path: Path) -> None:
    _yaml(path, {"model.layers.[0-9].input_layernorm": 1e-2})


@case("globs", "bracket_glob_b.yaml", SHOW, 0, "1 layer pattern(s)")
def bracket_glob_b(path: Path) -> None:
    _yaml(path, {"model.layers.?.input_layernorm": 1e-6})


# --------------------------------------------------------------------------- oversize


@case("oversize", "oversize_config.json", SHOW, 2, "larger than 4 MiB")
def oversize_config_json(path: Path) -> None:
    pad = " " * (4 << 20)
    path.write_text('{"model_type": "llama",' + pad + '"rms_norm_eps": 1e-6}', encoding="utf-8")


@case("oversize", "oversize.yaml", SHOW, 2, "MiB")
def oversize_yaml(path: Path) -> None:
    _yaml(
        path, {f"model.layers.{i}.some_rather_long_module_name.norm": 1e-6 for i in range(60_000)}
    )


@case("oversize", "many_globs.yaml", SHOW, 0, "4096 layer pattern(s)")
def many_globs(path: Path) -> None:
    """4,096 globs (the pattern cap): shown in linear time, bounded memory."""
    _yaml(path, {f"model.layers.{i}.*norm": 1e-6 for i in range(4096)})


@case("oversize", "many_keys.gguf", SHOW, 2, "key/value pairs declared (limit 65536)")
def many_gguf_keys(path: Path) -> None:
    kvs = gguf_model(extra=[(f"k.{i}", GG_STRING, gg_str("v")) for i in range(65_537)])
    path.write_bytes(gguf_bytes(kvs))


@case("oversize", "many_strings.gguf", SHOW, 0, "default eps 9.999999747378752e-06")
def many_gguf_strings(path: Path) -> None:
    """8,000 strings of 1,000 bytes (8 MB of metadata): kept up to 4 MiB, the rest skipped."""
    value = gg_str("s" * 1000)
    kvs = gguf_model(extra=[(f"k.{i}", GG_STRING, value) for i in range(8_000)])
    path.write_bytes(gguf_bytes(kvs))


@case("oversize", "oversize_summary.json", ("merge", "{file}"), 2, "MiB")
def oversize_summary(path: Path) -> None:
    path.write_text("{" + " " * (5 << 20) + "}", encoding="utf-8")


# --------------------------------------------------------------------------- outputs


@case(
    "outputs",
    "output_symlink.npz",
    ("ratio", "--eps", "1e-5", "--q-file", "{dir}/valid_q.npz", "-o", "{file}"),
    2,
    "is the same file as input",
    also=[
        (
            ("ratio", "--eps", "1e-5", "--q-file", "{dir}/valid_q.npz", "--save-summary", "{file}"),
            2,
            "is the same file as input",
        ),
        (
            ("ratio", "--eps", "1e-5", "--q-file", "{dir}/valid_q.npz", "--report", "json={file}"),
            2,
            "is the same file as input",
        ),
    ],
)
def output_symlink(path: Path) -> None:
    """A symlink to the valid dump: writing the report there would replace the dump."""
    path.symlink_to("valid_q.npz")


@case(
    "outputs",
    "output_hardlink.npz",
    ("ratio", "--eps", "1e-5", "--q-file", "{dir}/valid_q.npz", "-o", "{file}"),
    2,
    "is the same file as input",
    also=[
        (
            ("ratio", "--eps", "1e-5", "--q-file", "{dir}/valid_q.npz", "--save-summary", "{file}"),
            2,
            "is the same file as input",
        ),
    ],
)
def output_hardlink(path: Path) -> None:
    os.link(path.parent / "valid_q.npz", path)


@case(
    "outputs",
    "config_symlink.yaml",
    ("config", "show", "{dir}/bracket_glob.yaml", "-o", "{file}"),
    2,
    "is the same file as input",
)
def config_symlink(path: Path) -> None:
    path.symlink_to("bracket_glob.yaml")
