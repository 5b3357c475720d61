"""`rmsnorm-eps sensitivity` on a tiny random Llama: every figure against an independent loop
(set the eps, run the whole model, float64 KL), the screening's ranking, the pass count,
the gates and the formats."""

from __future__ import annotations

import io
import json
import math
import random
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rmsnorm_eps.capture.loading import load_model  # noqa: E402
from rmsnorm_eps.sensitivity.result import Change, Metrics  # noqa: E402
from rmsnorm_eps.sensitivity.run import measure  # noqa: E402

WORDS = [f"w{i}" for i in range(125)]
random.seed(7)
TEXTS = [" ".join(random.choice(WORDS) for _ in range(n)) for n in (12, 7, 16, 3)]
EPS = 1e-3  # the live eps is 1e-6; q of this random model is ~1e-4..1e-3: a visible change


def _save_tokenizer(d: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[EOS]", *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    ).save_pretrained(d)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(cfg).save_pretrained(d)
    _save_tokenizer(d)
    return d


@pytest.fixture(scope="session")
def loaded(tiny_dir: Path) -> Any:
    return load_model(tiny_dir, None, "float32", "cpu")


# ----------------------------------------------------------------------------- independent loop
@contextmanager
def _eps_set(model: Any, names: set[str] | None, eps: float) -> Iterator[None]:
    """Every (or each named) module with a variance_epsilon gets ``eps``."""
    old = {}
    for name, m in model.named_modules():
        if hasattr(m, "variance_epsilon") and (names is None or name in names):
            old[name] = m.variance_epsilon
            m.variance_epsilon = eps
    try:
        yield
    finally:
        for name, m in model.named_modules():
            if name in old:
                m.variance_epsilon = old[name]


def _logits(loaded: Any, text: str) -> tuple[Any, Any]:
    ids = torch.tensor([loaded.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return loaded.model(input_ids=ids).logits[0].double(), ids[0]


def _independent(loaded: Any, names: set[str] | None, eps: float) -> dict[str, float]:
    """KL (both classes), top-1, max |dz|, NMSE last, perplexity: one text at a time."""
    kl = [0.0, 0.0]
    n = [0, 0]
    top = [0, 0]
    maxabs = 0.0
    num = den = 0.0
    nll, count = 0.0, 0
    for text in TEXTS:
        base, ids = _logits(loaded, text)
        with _eps_set(loaded.model, names, eps):
            new, _ = _logits(loaded, text)
        lp = torch.log_softmax(base, -1)
        lq = torch.log_softmax(new, -1)
        per = (lp.exp() * (lp - lq)).sum(-1)
        agree = base.argmax(-1) == new.argmax(-1)
        for t in range(len(ids)):
            c = 0 if t == 0 else 1
            kl[c] += float(per[t])
            n[c] += 1
            top[c] += int(agree[t])
        maxabs = max(maxabs, float((new - base).abs().max()))
        num += float(((new[-1] - base[-1]) ** 2).sum())
        den += float((base[-1] ** 2).sum())
        for t in range(len(ids) - 1):
            nll -= float(lq[t, ids[t + 1]])
            count += 1
    return {
        "kl": kl[1] / n[1],
        "kl_first": kl[0] / n[0],
        "top1_agreement": top[1] / n[1],
        "top1_agreement_first": top[0] / n[0],
        "max_abs_logit_change": maxabs,
        "nmse_last": num / den,
        "perplexity": math.exp(nll / count),
    }


def _close(m: Metrics, want: dict[str, float], rel: float) -> None:
    for key, value in want.items():
        got = getattr(m, key)
        assert got == pytest.approx(value, rel=rel, abs=1e-12), key


def _norm_names(loaded: Any) -> list[str]:
    return [n for n, m in loaded.model.named_modules() if hasattr(m, "variance_epsilon")]


def _change(eps: float = EPS) -> Change:
    return Change(f"eps={eps:g}", None, f"eps={eps!r}", True)


@pytest.fixture(scope="session")
def exact_all(loaded: Any) -> Any:
    """Every norm measured exactly, one text per batch (no padding)."""
    return measure(loaded, TEXTS, [_change()], per_norm=True, per_role=True, batch_size=1)


# ----------------------------------------------------------------------------- the tests
def test_all_norms_equal_an_independent_loop(loaded: Any, exact_all: Any) -> None:
    want = _independent(loaded, None, EPS)
    _close(exact_all.changes[0].all, want, 1e-6)
    assert want["kl"] > 1e-4  # the change is visible: the test can fail


def test_each_exact_norm_row_equals_a_single_norm_swap(loaded: Any, exact_all: Any) -> None:
    rows = {r.name: r for r in exact_all.changes[0].per_norm}
    assert set(rows) == set(_norm_names(loaded)) and not any(r.estimated for r in rows.values())
    for name, row in rows.items():
        _close(row.metrics, _independent(loaded, {name}, EPS), 1e-6)
    total = sum(r.kl for r in rows.values())
    assert sum(r.share for r in rows.values()) == pytest.approx(1.0)
    assert rows["model.norm"].share == pytest.approx(rows["model.norm"].kl / total)
    kls = [r.kl for r in exact_all.changes[0].per_norm]
    assert kls == sorted(kls, reverse=True)  # sorted by effect


def test_per_role_rows_equal_role_swaps(loaded: Any, exact_all: Any) -> None:
    roles = {r.name: r for r in exact_all.changes[0].per_role}
    assert set(roles) == {"input", "post-attention", "final"}
    names = _norm_names(loaded)
    post = {n for n in names if n.endswith("post_attention_layernorm")}
    _close(roles["post-attention"].metrics, _independent(loaded, post, EPS), 1e-6)


def test_min_q_over_eps_is_the_capture_of_the_same_pass(loaded: Any, exact_all: Any) -> None:
    from rmsnorm_eps.capture.hooks import QCapture

    with QCapture(loaded.model) as cap, torch.no_grad():
        for text in TEXTS:
            loaded.model(input_ids=torch.tensor([loaded.tokenizer(text)["input_ids"]]))
    want = {m.name: float(m.q.min()) / m.eps for m in cap.result().modules}
    for info in exact_all.norms:
        assert info.min_q_over_eps == pytest.approx(want[info.name], rel=1e-12)


def test_padding_is_excluded(loaded: Any, exact_all: Any) -> None:
    padded = measure(loaded, TEXTS, [_change()], batch_size=4)
    a, b = padded.changes[0].all, exact_all.changes[0].all
    assert (a.tokens, a.tokens_first) == (b.tokens, b.tokens_first) == (34, 4)
    assert a.kl == pytest.approx(b.kl, rel=1e-4)
    assert a.perplexity == pytest.approx(b.perplexity, rel=1e-5)


def test_screening_keeps_the_true_top_three_within_budget(loaded: Any, exact_all: Any) -> None:
    truth = [r.name for r in exact_all.changes[0].per_norm]
    calls = {"mlp": 0, "head": 0}
    model = loaded.model
    hooks = [
        layer.mlp.register_forward_pre_hook(lambda *a: calls.__setitem__("mlp", calls["mlp"] + 1))
        for layer in model.model.layers
    ]
    hooks.append(
        model.lm_head.register_forward_pre_hook(
            lambda *a: calls.__setitem__("head", calls["head"] + 1)
        )
    )
    try:
        screened = measure(loaded, TEXTS, [_change()], per_norm=True, exact_top=3, batch_size=2)
    finally:
        for h in hooks:
            h.remove()
    rows = screened.changes[0].per_norm
    exact = [r.name for r in rows if not r.estimated]
    assert len(exact) == 3 and exact == truth[:3]
    assert all(r.metrics is None and r.kl is not None for r in rows if r.estimated)
    p = screened.passes
    # the count is of real evaluations: every MLP call is a layer run, every head call the rest
    assert p.forward == pytest.approx((calls["mlp"] + calls["head"]) / (4 * 2))
    assert p.backward == 8  # --samples backward passes
    # capture + screening forward + base + all-norms + 3 suffix runs (at most 1 pass each)
    assert p.equivalent <= 1 + 1 + 2 * 8 + 1 + 1 + 3
    assert p.naive == 1 + 1 + 7


def test_spec_change_matches_the_attribute_change(loaded: Any, exact_all: Any) -> None:
    spec = Change("spec", "eps=1e-6,dtype=float32", "eps=0.001,dtype=float32", False)
    same = Change("same", "eps=1e-6", "eps=1e-6", False)
    got = measure(loaded, TEXTS, [spec, same], batch_size=1)
    assert got.changes[0].all.kl == pytest.approx(exact_all.changes[0].all.kl, rel=1e-3)
    assert got.changes[1].all.kl == 0.0 and got.changes[1].all.top1_agreement == 1.0
    outside = Change("out", "eps=1e-6", "eps=1e-6,placement=outside", False)
    moved = measure(loaded, TEXTS, [outside], batch_size=4).changes[0].all
    assert moved.kl is not None and moved.kl > 0


def test_suggest_walks_the_sweep(loaded: Any) -> None:
    from rmsnorm_eps.sensitivity.run import SWEEP_FACTORS

    res = measure(loaded, TEXTS[:2], [_change()], suggest_max_kl=1e-4, batch_size=2)
    assert [s.group for s in res.suggestions] == ["model", "input", "post-attention", "final"]
    s = res.suggestions[0]
    assert len(s.points) == len(SWEEP_FACTORS) and s.eps == 1e-6
    up = [(e, k, k0) for e, k, k0 in s.points if e > s.eps]
    ok = [max(k, k0) <= 1e-4 for _, k, k0 in up]
    n_ok = ok.index(False) if False in ok else len(ok)
    assert s.largest == (up[n_ok - 1][0] if n_ok else s.eps)
    assert 0 < n_ok < len(up)  # the sweep crosses the gate: the test can fail


# ----------------------------------------------------------------------------- command line
def _run(cli: Callable[..., Any], d: Path, *extra: str) -> Any:
    texts = [a for t in TEXTS for a in ("--text", t)]
    return cli("sensitivity", "--model", str(d), *texts, "--batch-size", "4", *extra)


def test_gates_exit_zero_and_one(cli: Callable[..., Any], tiny_dir: Path) -> None:
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--max-kl", "1")
    assert r.exit_code == 0 and "PASS" in r.stderr
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--max-kl", "1e-5")
    assert r.exit_code == 1 and "FAIL" in r.stderr
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--min-top1", "1")
    assert r.exit_code == 1
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--max-kl", "1e-5", "--exit-zero")
    assert r.exit_code == 0
    r = _run(cli, tiny_dir, "--eps", "1e-6", "--min-top1", "1", "--max-kl", "0")
    assert r.exit_code == 0  # the live eps: nothing changes


def test_usage_errors(cli: Callable[..., Any], tiny_dir: Path) -> None:
    assert _run(cli, tiny_dir).exit_code == 2
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert r.exit_code == 2 and "not both" in r.stderr
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--exact-top", "2")
    assert r.exit_code == 2 and "--per-norm" in r.stderr
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--suggest")
    assert r.exit_code == 2 and "--max-kl" in r.stderr
    r = _run(cli, tiny_dir, "--from", "eps=1e-6", "--to", "eps=-1")
    assert r.exit_code == 2 and "rmsnorm-eps: error:" in r.stderr


def test_json_validates_and_every_format_renders(
    cli: Callable[..., Any], tiny_dir: Path, tmp_path: Path
) -> None:
    import jsonschema

    from rmsnorm_eps.reports.schema import load_schema

    args = ["--eps", "1e-3", "--per-norm", "--exact-top", "2", "--per-role", "--max-kl", "1"]
    r = _run(cli, tiny_dir, *args, "-f", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    jsonschema.Draft202012Validator(load_schema("sensitivity")).validate(doc)
    change = doc["changes"][0]
    for key in ("name", "kl", "kl_first", "top1_agreement", "max_abs_logit_change", "nmse_last"):
        assert key in change
    rows = change["per_norm"]
    screen = change["screen"]
    exact = sum(not row["estimated"] for row in rows)
    # the 2 asked, then extended until the others are clearly below (at most 2 K = 4)
    assert screen["asked"] == 2 and exact == screen["exact"] and 2 <= exact <= 4
    assert screen["sure"] == (not any(row["uncertain"] for row in rows))
    for row in rows:
        assert {"name", "kl", "kl_first", "share", "min_q_over_eps"} <= set(row)
    for fmt in ("markdown", "github", "junit", "sarif", "text"):
        out = tmp_path / f"r.{fmt}"
        r = _run(cli, tiny_dir, "--eps", "1e-3", "--max-kl", "1e-5", "-f", fmt, "-o", str(out))
        assert r.exit_code == 1, fmt
        body = out.read_text("utf-8")
        assert "eps=0.001" in body, fmt
        if fmt == "sarif":
            results = json.loads(body)["runs"][0]["results"]
            assert [x["ruleId"] for x in results if x["level"] == "error"] == ["sensitivity/kl"]
        if fmt == "junit":
            import xml.etree.ElementTree as ET

            assert ET.fromstring(body).tag == "testsuites"
        if fmt == "github":
            assert body.startswith("::error")


def test_layernorm_model_spec_matches_attribute(tmp_path: Path) -> None:
    """A LayerNorm model (GPT-2): the replacement forward's LayerNorm formula, on SPECs equal
    to the live setting, reproduces the attribute change."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path)
    _save_tokenizer(tmp_path)
    gpt = load_model(tmp_path, None, "float32", "cpu")
    attr = Change("a", None, "eps=0.5", True)
    spec = Change("s", "eps=1e-5,dtype=float32", "eps=0.5,dtype=float32", False)
    res = measure(gpt, TEXTS, [attr, spec], per_norm=True, batch_size=4)
    a, s = res.changes[0], res.changes[1]
    assert {n.norm for n in res.norms} == {"layer"}
    assert a.all.kl is not None and a.all.kl > 1e-6
    assert s.all.kl == pytest.approx(a.all.kl, rel=1e-3)
    assert [r.name for r in a.per_norm][:2] == [r.name for r in s.per_norm][:2]
    assert {n.role for n in res.norms} == {"other", "final"}


@pytest.mark.slow
def test_torchrun_two_ranks_reduce_to_one_process(tiny_dir: Path, tmp_path: Path) -> None:
    """gloo, 2 ranks over 2 batches: the rank-0 document equals the one-process one (sums,
    counts and maxima all-reduced; the estimates too)."""
    import os
    import socket
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    args = [*(a for t in TEXTS for a in ("--text", t)), "--batch-size", "2"]
    args += ["--model", str(tiny_dir), "--eps", "1e-3", "--per-norm", "--exact-top", "3"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    docs = []
    for launcher in (
        [],
        [
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
        ],
    ):
        out = tmp_path / f"r{len(launcher)}.json"
        cmd = [sys.executable, *launcher, "-m", "rmsnorm_eps", "sensitivity", *args]
        r = subprocess.run(
            [*cmd, "-f", "json", "-o", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        docs.append(json.loads(out.read_text("utf-8")))
    one, two = docs
    assert two["ranks"] == 2 and one["ranks"] == 1
    assert two["tokens"] == one["tokens"] == 38  # 34 at positions >= 1, 4 at position 0
    a, b = one["changes"][0], two["changes"][0]
    for key in ("kl", "kl_first", "top1_agreement", "max_abs_logit_change", "nmse_last"):
        assert b[key] == pytest.approx(a[key], rel=1e-9), key
    assert [r["name"] for r in b["per_norm"]] == [r["name"] for r in a["per_norm"]]
    # the timing is each process's own
    assert {**two["passes"], "timing": None} == {**one["passes"], "timing": None}


@pytest.mark.parametrize(
    ("variant", "why"),
    [
        ({"norm": "gated-rms", "gate_fn": "sigmoid"}, "gate is sigmoid"),
        ({"input_scale": "1+w"}, "scales its input by 1+w"),
        ({"eps_rule": "clamp"}, "eps rule is clamp"),
        ({"inputs": 2}, "2 inputs in one call"),
        ({"norm": "layer", "channels_first": True}, "channels of [B, C, T]"),
    ],
)
def test_a_spec_never_replaces_a_norm_it_cannot_write(variant: dict[str, object], why: str) -> None:
    """Norm kinds the replacement formula does not compute are refused by name, never run
    under a formula that is not theirs."""
    from dataclasses import replace as dc_replace

    import torch

    from rmsnorm_eps.capture.errors import CaptureError
    from rmsnorm_eps.capture.records import ModuleRecord
    from rmsnorm_eps.sensitivity.swap import replace_forward, spec_of

    base = ModuleRecord(
        name="model.norm",
        class_name="X",
        kind="rms",
        eps=1e-6,
        eps_source=None,
        dim=8,
        input_dtype="float32",
        gain="w",
        weight=None,
        weight_dtype=None,
        layout=None,
        heads=1,
        calls=1,
        count=1,
        norm="rms",
    )
    module = torch.nn.Identity()
    record = dc_replace(base, **variant)
    spec = spec_of("eps=1e-5,placement=outside", "--to")
    with pytest.raises(CaptureError, match=re.escape(why)), replace_forward(module, record, spec):
        pass
    assert "forward" not in module.__dict__  # nothing was replaced


def test_without_torch_the_sensitivity_extra_is_named(
    cli: Callable[..., Any], tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def find(name: str, *args: Any) -> Any:
        return None if name == "torch" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find)
    r = _run(cli, tiny_dir, "--eps", "1e-3")
    assert r.exit_code == 2
    assert "sensitivity needs the 'torch' package: install the [torch] extra" in r.stderr
    assert "capture needs" not in r.stderr and "Traceback" not in r.stderr


def test_from_to_shows_the_from_specs_base_perplexity(loaded: Any) -> None:
    """The --from base is every norm under the SPEC: at the model's own eps (1e-6) and
    formula, its perplexity is the model's as loaded (to float32 rounding), and says so."""
    from rmsnorm_eps.reports import render
    from rmsnorm_eps.reports.options import RenderOptions

    as_is = measure(loaded, TEXTS, [Change("eps=0.001", None, "eps=0.001", True)])
    spec = measure(loaded, TEXTS, [Change("a -> b", "eps=1e-6", "eps=1e-3", False)])
    assert as_is.perplexity_base_from is None and spec.perplexity_base_from == "eps=1e-6"
    assert as_is.perplexity_base is not None and spec.perplexity_base is not None
    assert spec.perplexity_base == pytest.approx(as_is.perplexity_base, rel=1e-5)
    line = render(spec, "text", RenderOptions()).splitlines()[1]
    assert line.startswith("base perplexity ") and line.endswith(" (--from eps=1e-6)")
    assert "-" not in line.split()[2]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_only_and_not_with_quiet(
    cli: Callable[..., Any], tiny_dir: Path, loaded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmsnorm_eps.cli.sensitivity_cmd import _progress

    # off a terminal (CliRunner's stderr is not one): the report and the summary line only
    r = _run(cli, tiny_dir, "--eps", "1e-3", "--per-norm")
    assert r.exit_code == 0
    assert "ETA" not in r.stderr and "\r" not in r.stderr and "\x1b" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # the library reports (done, planned) after each run, done growing to planned
    calls: list[tuple[float, float]] = []
    measure(loaded, TEXTS, [_change()], per_norm=True, progress=lambda d, p: calls.append((d, p)))
    assert len(calls) >= 1 + 6  # the change in every norm, then each of the 6 norms
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert calls[-1][0] == pytest.approx(calls[-1][1]) and all(d <= p + 1e-9 for d, p in calls)
    # on a terminal: a bar with passes and ETA on stderr, nothing on stdout; --quiet: none
    out, err = io.StringIO(), _Tty()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    with _progress(True) as update:
        assert update is not None
        update(1.0, 4.0)
        update(4.0, 4.0)
    assert out.getvalue() == "" and "passes" in err.getvalue() and "ETA" in err.getvalue()
    with _progress(False) as update:
        assert update is None
