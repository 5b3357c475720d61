"""``rmsnorm-eps capture``: run texts through a local model and dump q at every RMSNorm."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from rmsnorm_eps.cli._app import EXIT_OK, app, usage_error
from rmsnorm_eps.cli._output import check_format, format_option, output_option, summary_line


def _read_texts(texts: list[str], text_file: Path | None) -> list[str]:
    from rmsnorm_eps.dumps import check_regular_file
    from rmsnorm_eps.errors import InputFileError

    if texts and text_file is not None:
        raise usage_error("give either --text or --text-file, not both")
    if text_file is None:
        if not texts:
            raise usage_error('give the input: --text "..." (repeatable) or --text-file F')
        return list(texts)
    check_regular_file(text_file)
    try:
        content = text_file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(text_file, f"not UTF-8 text (byte {exc.start})") from None
    lines = [line for line in content.splitlines() if line.strip()]
    if not lines:
        raise InputFileError(text_file, "holds no text (one text per non-empty line)")
    return lines


def _check_capture_outputs(
    model: Path, text_file: Path | None, out: Path | None, config_out: Path | None
) -> None:
    """--out and --config-out may be neither an input (the texts file, the model directory or
    a file in it, such as its config.json or weights) nor each other (exit 2, nothing
    written)."""
    from rmsnorm_eps.cli._paths import check_outputs

    inputs: list[tuple[str, Path | None]] = [("--text-file", text_file), ("--model", model)]
    if model.is_dir():
        inputs += [("--model", f) for f in sorted(model.iterdir()) if f.is_file()]
    check_outputs(inputs, [("--out", out), ("--config-out", config_out)])


@app.command(
    "capture",
    short_help="Record q per token at every norm of a local model (offline), with the live eps.",
    epilog=(
        "Examples:\n\n"
        '  rmsnorm-eps capture --model ./SmolLM2 --text "Hello there" --out q.npz '
        "--config-out smollm2.yaml\n\n"
        "  rmsnorm-eps capture --model DIR --gguf model.gguf --text-file texts.txt --out q.npz\n\n"
        "  rmsnorm-eps capture --model DIR --text-file big.txt --summary-only --out s.json\n\n"
        "  rmsnorm-eps merge s.json s2.json   (summaries of capture runs merge exactly)\n\n"
        "Exit codes: 0 captured, 2 usage or input error (no model, missing extras, bad text)."
    ),
)
def capture(
    model: Path = typer.Option(..., "--model", help="Local Hugging Face model directory."),
    gguf: str = typer.Option(None, "--gguf", help="GGUF file name inside --model to load."),
    text: list[str] = typer.Option(None, "--text", help="A text to run (repeatable)."),
    text_file: Path = typer.Option(
        None, "--text-file", help="UTF-8 file: one text per non-empty line."
    ),
    max_tokens: int = typer.Option(
        None, "--max-tokens", min=1, help="Truncate each text to N tokens."
    ),
    dtype: str = typer.Option("float32", "--dtype", help="Model dtype: float32 or bfloat16."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Dump (.npz: q per module, with ::position and ::batch), or with "
        "--summary-only the mergeable summary (JSON, read by `rmsnorm-eps merge`).",
        dir_okay=False,
    ),
    config_out: Path = typer.Option(
        None, "--config-out", help="Write the live settings as a YAML config.", dir_okay=False
    ),
    summary_only: bool = typer.Option(
        False,
        "--summary-only",
        help="Keep bounded-memory summaries instead of every q; "
        "prints the ratio report (needs the bound: --delta or --min-ratio).",
    ),
    delta: float = typer.Option(None, "--delta", help="Bound for --summary-only (default 0.01)."),
    min_ratio: float = typer.Option(None, "--min-ratio", help="Bound as a minimum q/eps."),
    module: list[str] = typer.Option(
        None, "--module", help="Also hook this module name or glob (repeatable)."
    ),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Texts per forward pass."),
    fmt: str = format_option(),
    output: Path = output_option(),
) -> None:
    """Run texts through a local model (offline) and record q = mean(x^2) at every RMSNorm.

    Per token (and per head for q/k norms), with its position; per module the live eps (read
    from the running module, torch's eps=None resolved), dim, gain (w or 1+w), input dtype.
    """
    from rmsnorm_eps.analysis import resolve_bound
    from rmsnorm_eps.capture.hooks import QCapture
    from rmsnorm_eps.capture.loading import load_model, run_texts
    from rmsnorm_eps.capture.output import write_config, write_dump
    from rmsnorm_eps.capture.report import CaptureReport, summary_report
    from rmsnorm_eps.merge import write_summary

    check_format(fmt)
    if dtype not in ("float32", "bfloat16"):
        raise typer.BadParameter(f"{dtype!r} is not float32 or bfloat16", param_hint="'--dtype'")
    if (delta is not None or min_ratio is not None) and not summary_only:
        raise usage_error("--delta and --min-ratio apply to --summary-only")
    _check_capture_outputs(model, text_file, out, config_out)
    texts = _read_texts(text or [], text_file)
    d_value, ratio = resolve_bound(delta, min_ratio)
    loaded = load_model(model, gguf, dtype)
    with QCapture(
        loaded.model,
        names=module or (),
        summary_only=summary_only,
        min_ratio=ratio if summary_only else None,
    ) as cap:
        _run(loaded, texts, max_tokens, batch_size, run_texts)
    result = cap.result()
    report = summary_report(result, d_value, str(out)) if summary_only else None
    if report is not None:
        write_summary(report, out)  # the summary `rmsnorm-eps merge` reads
    else:
        write_dump(result, out)
    if config_out is not None:
        write_config(result, config_out, loaded.name, loaded.source)
    outputs = {
        "dump" if not summary_only else "summary": str(out),
        "config": str(config_out) if config_out else None,
    }
    from rmsnorm_eps.cli._output import emit

    if report is not None:
        emit(report, fmt, output)
    else:
        emit(CaptureReport(result, loaded.name, outputs), fmt, output)
    ran = sum(1 for m in result.modules if m.count)
    summary_line(
        f"captured {ran} norm module(s), {result.sequences} text(s), "
        f"{result.tokens} tokens -> {out}"
    )
    raise typer.Exit(EXIT_OK)


def _run(
    loaded: object,
    texts: list[str],
    max_tokens: int | None,
    batch_size: int,
    run_texts: Callable[..., int],
) -> None:
    """Run the texts; a progress bar on stderr only when stderr is a terminal."""
    runner = run_texts  # imported lazily by the caller (torch is heavy)
    if not sys.stderr.isatty():
        runner(loaded, texts, max_tokens=max_tokens, batch_size=batch_size)
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("capturing", total=len(texts))
        runner(
            loaded,
            texts,
            max_tokens=max_tokens,
            batch_size=batch_size,
            progress=lambda n: bar.update(task, completed=n),
        )
