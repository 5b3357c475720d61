"""Every hostile corpus file through the real command line, in a process of its own each.

Per case: the documented exit code; on exit 2 exactly one stderr line, ``rmsnorm-eps: error:``,
naming the file and the problem; never a traceback or a warning; no code from the file runs
(the pickle and YAML payloads would create a marker file); at most 256 MiB peak resident
memory (VmHWM of the child's own address space: ru_maxrss of children would include this
test process's peak, which survives fork and exec) and 10 s of CPU time (CPU, not wall clock:
the machine running the suite may be busy; a hang is caught by a generous wall timeout).
An address-space limit (RLIMIT_AS, 2 GiB) turns a runaway allocation into a clean failure.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import queue
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from corpus.make_corpus import _SPECS, Case, all_cases, build, zip_bomb

from tests.runner_lines import ANNOTATION, assert_file_inert, runner_commands

#: The torch.save cases need the [torch] extra; without it they skip, the others still run.
HAS_TORCH = importlib.util.find_spec("torch") is not None
pytestmark = pytest.mark.slow  # the whole corpus run (CI runs it; -m "not slow" skips it)

ROOT = Path(__file__).resolve().parents[1]
PEAK_LIMIT_KIB = 256 * 1024
#: A torch.save file needs torch itself, whose import alone takes 230 to 280 MiB (more when the
#: venv lives on tmpfs): those cases may use this much beyond a bare ``import torch``.
TORCH_EXTRA_KIB = 48 * 1024
CPU_LIMIT_S = 10.0
WALL_TIMEOUT_S = 120.0
AS_LIMIT = 2 << 30

#: Runs ``python -m rmsnorm_eps ARGS`` (runpy, exactly as ``-m`` does) after setting the
#: address-space limit, and records the process's own peak RSS and CPU time at exit. The
#: controls below (torch's baseline, the zip bomb loaded whole) run it as a fresh process.
_LAUNCHER = r"""
import atexit, json, os, resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (int(os.environ["HOSTILE_AS"]),) * 2)
def _record():
    with open("/proc/self/status") as fh:
        hwm = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["HOSTILE_STATS"], "w") as fh:
        json.dump({"peak_kib": hwm, "cpu_s": ru.ru_utime + ru.ru_stime}, fh)
atexit.register(_record)
sys.argv[0] = "rmsnorm-eps"
runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)
"""

#: The cases' launcher: a server that imports what every run imports (numpy and each command
#: of the CLI; with "torch", torch too, which the torch.save cases need) once, then, per request
#: line, forks a child that runs ``python -m rmsnorm_eps ARGS`` as the launcher above does,
#: with stdin on /dev/null and stdout and stderr into files, and answers its exit code. Each
#: case is still its own process with its own address space, limit, peak RSS and CPU time (a
#: forked child's counters start at zero); what it is spared is the interpreter's start and
#: the imports, about a third of a second a case (more with torch), 300 times.
_SERVER = r"""
import atexit, importlib, json, os, resource, runpy, signal, sys, traceback
import numpy
from rmsnorm_eps.cli._commands import COMMANDS
for entry in COMMANDS.values():
    importlib.import_module("rmsnorm_eps.cli." + entry.module)
if sys.argv[1] == "torch":
    import torch
answers = sys.stdout

def _code(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1

def _child(req):
    code = 1
    try:
        os.chdir(req["cwd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        resource.setrlimit(resource.RLIMIT_AS, (req["as"],) * 2)
        signal.alarm(req["timeout"])  # a hang dies of SIGALRM
        sys.argv = ["rmsnorm-eps", *req["argv"]]
        try:
            runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _code(exc)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            code = 120
        with open("/proc/self/status") as fh:
            hwm = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
        ru = resource.getrusage(resource.RUSAGE_SELF)
        with open(req["stats"], "w") as fh:
            json.dump({"peak_kib": hwm, "cpu_s": ru.ru_utime + ru.ru_stime}, fh)
    finally:
        os._exit(code)

print("ready", file=answers, flush=True)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        _child(req)
    _, status = os.waitpid(pid, 0)
    hung = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM
    code = None if hung else os.waitstatus_to_exitcode(status)
    print(json.dumps({"code": code}), file=answers, flush=True)
"""


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # None: killed by the wall timeout (a hang)
    stdout: str
    stderr: str
    peak_kib: int | None
    cpu_s: float | None


def _expand(text: str, case: Case, corpus: Path) -> str:
    return text.replace("{file}", str(corpus / case.file)).replace("{dir}", str(corpus))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        OPENBLAS_NUM_THREADS="1",
        NO_COLOR="1",
        COLUMNS="120",
    )
    env.pop("RMSNORM_EPS_DEBUG", None)
    return env


class _Server:
    """One fork server (see ``_SERVER``); requests one at a time."""

    def __init__(self, preload: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
        assert self._answer() == "ready"

    def _answer(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the fork server died (exit {self.proc.poll()})"
        return line.strip()

    def run(self, request: dict[str, object]) -> int | None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        code: int | None = json.loads(self._answer())["code"]
        return code

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=WALL_TIMEOUT_S)


def _run(case: Case, corpus: Path, stats_dir: Path, server: _Server) -> Outcome:
    key = hashlib.sha1(case.name.encode()).hexdigest()
    stats, out, err = (stats_dir / f"{key}.{ext}" for ext in ("json", "out", "err"))
    request = {
        "argv": [_expand(a, case, corpus) for a in case.argv],
        "cwd": str(corpus),
        "out": str(out),
        "err": str(err),
        "stats": str(stats),
        "as": AS_LIMIT,
        "timeout": int(WALL_TIMEOUT_S),
    }
    code = server.run(request)
    data = json.loads(stats.read_text()) if stats.exists() else {}
    return Outcome(
        code,
        out.read_text(encoding="utf-8"),
        err.read_text(encoding="utf-8"),
        data.get("peak_kib"),
        data.get("cpu_s"),
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile corpus ü")  # a space and non-ASCII in every path


@pytest.fixture(scope="module")
def built(corpus: Path) -> dict[str, str]:
    """Build the corpus; the digest of every file as built (before any case runs)."""
    build(corpus)
    return _digest(corpus)


@pytest.fixture(scope="module")
def outcomes(
    corpus: Path, built: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    """Run every case on the built corpus, two at a time (CPU time is what is limited), each
    thread with its own fork servers."""
    cases = [c for c in all_cases() if c.category != "torch" or HAS_TORCH]
    stats_dir = tmp_path_factory.mktemp("stats")
    servers: queue.Queue[dict[str, _Server]] = queue.Queue()
    for _ in range(2):
        servers.put({})

    def one(case: Case) -> tuple[str, Outcome]:
        mine = servers.get()
        try:
            kind = "torch" if case.category == "torch" else "cli"
            if kind not in mine:
                mine[kind] = _Server(kind)
            return case.name, _run(case, corpus, stats_dir, mine[kind])
        finally:
            servers.put(mine)

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            return dict(pool.map(one, cases))
    finally:
        while not servers.empty():
            for server in servers.get().values():
                server.close()


CASES = all_cases()


def _json_path(doc: object, dotted: str) -> object:
    for part in dotted.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]  # type: ignore[index]
    return doc


@pytest.fixture(scope="module")
def torch_baseline_kib(tmp_path_factory: pytest.TempPathFactory) -> int:
    """Peak RSS of a process that only imports torch, measured as the cases are."""
    if not HAS_TORCH:  # the torch.save cases skip (the [torch] extra is not installed)
        return 0
    stats = tmp_path_factory.mktemp("torch baseline") / "stats.json"
    launcher = _LAUNCHER.replace(
        'runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)', "import torch"
    )
    env = dict(os.environ, HOSTILE_AS=str(AS_LIMIT), HOSTILE_STATS=str(stats))
    subprocess.run([sys.executable, "-c", launcher], check=True, env=env, timeout=WALL_TIMEOUT_S)
    peak: int = json.loads(stats.read_text())["peak_kib"]
    return peak


def _peak_limit(case: Case, torch_baseline_kib: int) -> int:
    """256 MiB; for torch.save files, 48 MiB beyond importing torch (which they need)."""
    if case.category == "torch":
        return max(PEAK_LIMIT_KIB, torch_baseline_kib + TORCH_EXTRA_KIB)
    return PEAK_LIMIT_KIB


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(
    case: Case, corpus: Path, outcomes: dict[str, Outcome], torch_baseline_kib: int
) -> None:
    if case.category == "torch":
        pytest.importorskip("torch")
    if case.root_skips and os.geteuid() == 0:
        pytest.skip("running as root: permission bits do not stop root from reading")
    out = outcomes[case.name]
    where = f"{case.name}: exit {out.exit_code}\nstdout: {out.stdout[-2000:]}\nstderr: {out.stderr}"
    assert out.exit_code is not None, f"hung (killed after {WALL_TIMEOUT_S} s): {where}"
    assert "Traceback" not in out.stderr + out.stdout, where
    assert "Warning" not in out.stderr, where
    assert "internal error" not in out.stderr, where
    assert out.exit_code == case.exit_code, where
    for line in (out.stdout + "\n" + out.stderr).splitlines():  # read as the Actions runner
        if not ("github" in case.argv and ANNOTATION.match(line)):
            assert runner_commands(line) == [], (line[:300], where)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, where
    if case.exit_code == 2:
        assert lines[0].startswith("rmsnorm-eps: error: "), where
        assert case.message in lines[0], where
        target = _expand("{file}", case, corpus)
        named = target if "{file}" in " ".join(case.argv) else case.file
        assert named in lines[0] or case.file in lines[0], where
    else:
        assert case.message in out.stderr + out.stdout, where
    if case.json_checks:
        doc = json.loads(out.stdout)
        for dotted, expected in case.json_checks:
            exp = _expand(expected, case, corpus) if isinstance(expected, str) else expected
            assert _json_path(doc, dotted) == exp, (dotted, where)
    if case.marker is not None:
        assert not (corpus / case.marker).exists(), f"payload ran: {case.marker}"
    limit = _peak_limit(case, torch_baseline_kib)
    assert out.peak_kib is not None and out.peak_kib <= limit, (out.peak_kib, limit, where)
    assert out.cpu_s is not None and out.cpu_s <= CPU_LIMIT_S, (out.cpu_s, where)


def test_corpus_size_and_coverage() -> None:
    """At least 40 hostile files, covering every reader."""
    files = {(c.category, c.file) for c in CASES if c.category != "valid"}
    assert len(files) >= 40
    assert len({c.file for c in CASES}) == len(_SPECS)  # one directory: no name used twice
    categories = {c.category for c in CASES}
    assert {"npy", "npz", "yaml", "json", "gguf", "filesystem"} <= categories
    assert {"safetensors", "actual", "probes", "gain", "record", "merge"} <= categories
    commands = {c.argv[0] if c.argv[0] != "config" else "config show" for c in CASES}
    assert {"ratio", "compare", "config show", "parity", "probe", "merge"} <= commands
    assert any("--config" in c.argv for c in CASES)
    assert any("--record" in c.argv for c in CASES) and any("--gain" in c.argv for c in CASES)


def test_no_input_was_changed(
    corpus: Path, built: dict[str, str], outcomes: dict[str, Outcome]
) -> None:
    """After every run (outputs aimed at inputs through symlinks and hard links among them),
    every corpus file still has the bytes it was built with (the bytes of any fresh build:
    test_corpus_is_deterministic): nothing was overwritten."""
    after = _digest(corpus)
    assert {name: after.get(name) for name in built} == built


def test_written_files_are_inert(corpus: Path, outcomes: dict[str, Outcome]) -> None:
    """The summary ``ratio --save-summary`` wrote from the hostile-names dump: a runner
    ``cat``-ing it reads no command, and it loads back to the exact names."""
    from rmsnorm_eps.merge import load_summary

    written = corpus / "names_members.npz.summary.json"
    assert_file_inert(written)
    from corpus.issue12_cases import NAMES

    assert {layer.name for layer in load_summary(written).layers} == set(NAMES)


def _digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file() and os.access(p, os.R_OK) and p.stat().st_mode & 0o444
    }


def test_corpus_is_deterministic(built: dict[str, str], tmp_path: Path) -> None:
    """A second build gives the same bytes as the corpus the cases ran on."""
    build(tmp_path / "again")
    again = _digest(tmp_path / "again")
    assert len(again) >= 40 and again == built


def test_payloads_would_run_if_unpickled(tmp_path: Path) -> None:
    """Control: the pickle payloads are real (np.load with allow_pickle=True creates the
    marker), so the "marker does not appear" assertions above can fail."""
    for spec in _SPECS:
        if spec.file in ("pickle_object.npy", "pickled_member.npz"):
            spec.make(tmp_path / spec.file)
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        np.load("pickle_object.npy", allow_pickle=True)
        with np.load("pickled_member.npz", allow_pickle=True) as npz:
            npz["evil"]
    finally:
        os.chdir(cwd)
    assert (tmp_path / "PWNED_npy").exists() and (tmp_path / "PWNED_npz").exists()


def test_memory_measure_sees_real_allocations(tmp_path: Path) -> None:
    """Control: the VmHWM measure of the launcher does see memory that is really used (the
    zip bomb loaded whole by numpy), so the 256 MiB assertion above can fail."""
    script = tmp_path / "load_all.py"
    script.write_text(
        "import numpy as np, sys\n"
        "with np.load(sys.argv[-1]) as z: a = z['bomb']; print(a.nbytes)\n",
        encoding="utf-8",
    )
    zip_bomb(tmp_path / "zip_bomb.npz")
    stats = tmp_path / "stats.json"
    launcher = _LAUNCHER.replace(
        'runpy.run_module("rmsnorm_eps", run_name="__main__", alter_sys=True)',
        "runpy.run_path(sys.argv[1], run_name='__main__')",
    )
    env = dict(os.environ, HOSTILE_AS=str(AS_LIMIT), HOSTILE_STATS=str(stats))
    subprocess.run(
        [sys.executable, "-c", launcher, str(script), str(tmp_path / "zip_bomb.npz")],
        check=True,
        env=env,
        timeout=WALL_TIMEOUT_S,
        capture_output=True,
    )
    assert json.loads(stats.read_text())["peak_kib"] > PEAK_LIMIT_KIB


def _peaks(outcomes: dict[str, Outcome]) -> Iterator[tuple[str, int, float]]:
    for name, o in outcomes.items():
        if o.peak_kib is not None and o.cpu_s is not None:
            yield name, o.peak_kib, o.cpu_s


def test_report_worst_case(
    outcomes: dict[str, Outcome], capsys: pytest.CaptureFixture[str]
) -> None:
    """Prints the worst peak memory and CPU time (for the closing note); -s to see it."""
    rows = list(_peaks(outcomes))
    assert rows
    worst_mem = max(rows, key=lambda r: r[1])
    worst_cpu = max(rows, key=lambda r: r[2])
    with capsys.disabled():
        print(
            f"\nworst peak RSS: {worst_mem[1] / 1024:.1f} MiB ({worst_mem[0]}); "
            f"worst CPU: {worst_cpu[2]:.2f} s ({worst_cpu[0]}); {len(rows)} runs"
        )


def test_security_doc_counts_the_corpus() -> None:
    """docs/security.md's table (files and cases per category) and totals are the corpus's."""
    import re
    from collections import Counter

    doc = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    rows = {
        m[1]: (int(m[2]), int(m[3]))
        for m in re.finditer(r"^\| ([a-z]+) \| (\d+) \| (\d+) \|", doc, flags=re.MULTILINE)
    }
    files = Counter(spec.category for spec in _SPECS)
    cases = Counter(c.category for c in CASES)
    assert rows == {cat: (files[cat], cases[cat]) for cat in files}
    helpers = files["valid"]
    assert (
        f"That makes {len(_SPECS) - helpers} corpus files plus three valid helpers, and "
        f"{len(CASES)} command runs" in " ".join(doc.split())
    )
    assert helpers == 3
