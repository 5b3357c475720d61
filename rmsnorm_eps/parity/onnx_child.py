"""onnxruntime in a child process, bounded and quiet, for ``parity onnx``.

A hostile graph can make onnxruntime run forever (a Loop of 2^62 iterations), allocate
gigabytes (a ConstantOfShape) or log node and file names to stderr (raw, with ANSI colour).
So the parent never imports onnxruntime: :class:`OrtChild` starts ``python -m
rmsnorm_eps.parity.onnx_child`` with an address-space limit (``RLIMIT_AS``), one thread, its
stderr into a temporary file that is never relayed raw, and its own stdout kept for the
protocol (file descriptor 1 is pointed at stderr, so nothing onnxruntime prints can corrupt
it). Each request has a wall limit; a child that runs past it, dies or answers nonsense is
killed and the request fails with one line (:class:`OrtChildError`); the next request starts a
fresh child.

The protocol is JSON headers and raw array bytes, never pickle: the parent writes a header
line ``{"op": "run", "model": N, "output": NAME, "inputs": [{"name", "dtype", "shape",
"nbytes"}]}`` or ``{"op": "optimize", "model": N, "path": FILE}``, then the model's bytes and
each input's bytes; the child answers ``{"ok": true, "dtype", "shape", "nbytes"}`` and the
output's bytes, or ``{"ok": false, "error": TEXT}``. The model always travels as bytes: the
child never opens the model file (nor, therefore, external data it names; the parent refuses
models that have any).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np

__all__ = [
    "MEMORY_LIMIT_BYTES",
    "WALL_LIMIT_S",
    "OrtChild",
    "OrtChildError",
]

#: Seconds one request (one norm's session and run, or the optimized copy) may take.
WALL_LIMIT_S = 30.0
#: Seconds the child may take to start (import numpy and onnxruntime).
START_LIMIT_S = 60.0
#: Address space of the child (RLIMIT_AS): onnxruntime itself takes about 180 MiB.
MEMORY_LIMIT_BYTES = 1 << 30
#: Characters of an onnxruntime message kept (one line).
MESSAGE_CHARS = 200
_READY = b"ready\n"
_MAX_HEADER = 1 << 16


class OrtChildError(Exception):
    """The child failed a request: onnxruntime refused it, or the child ran past a limit."""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MESSAGE_CHARS]


def _package_root() -> str:
    import rmsnorm_eps

    return str(Path(rmsnorm_eps.__file__).resolve().parent.parent)


class OrtChild:
    """One bounded onnxruntime child, restarted after a failure (see the module docstring).

    Use as a context manager; :meth:`run` and :meth:`optimize` send one request each."""

    def __init__(
        self,
        *,
        memory_limit: int | None = None,
        wall_limit: float | None = None,
    ) -> None:
        self.memory_limit = MEMORY_LIMIT_BYTES if memory_limit is None else memory_limit
        self.wall_limit = WALL_LIMIT_S if wall_limit is None else wall_limit
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def __enter__(self) -> OrtChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the child (it exits when its stdin closes; killed if it does not)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_package_root(), env.get("PYTHONPATH", "")) if p
        )
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close/_kill)
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmsnorm_eps.parity.onnx_child", str(self.memory_limit)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._proc = proc
        if self._read(len(_READY), START_LIMIT_S, "start") != _READY:
            self._fail("the child process did not start")
        return proc

    def _why(self) -> str:
        """The last line the child wrote to stderr (one line, escaped by every reporter)."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 4096))
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return _one_line(lines[-1]) if lines else ""

    def _fail(self, what: str) -> NoReturn:
        why = self._why()
        self._kill()
        raise OrtChildError(what + (f" ({why})" if why else ""))

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _read(self, n: int, limit: float, what: str) -> bytes:
        """Exactly ``n`` bytes of the child's stdout within ``limit`` seconds, else fail."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        out = bytearray()
        deadline = time.monotonic() + limit
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(out) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    shown = START_LIMIT_S if what == "start" else self.wall_limit
                    self._fail(f"ran past the {shown:g} s wall limit ({what})")
                chunk = os.read(fd, min(n - len(out), 1 << 20))
                if not chunk:
                    code = self._proc.wait()
                    self._fail(f"the child process ended with code {code} ({what})")
                out += chunk
        return bytes(out)

    def _read_header(self, limit: float, what: str) -> dict[str, Any]:
        buf = bytearray()
        deadline = time.monotonic() + limit
        while not buf.endswith(b"\n"):
            if len(buf) > _MAX_HEADER:
                self._fail("the child process answered nonsense")
            buf += self._read(1, max(0.0, deadline - time.monotonic()), what)
        try:
            header = json.loads(buf)
        except ValueError:
            header = None
        if not isinstance(header, dict):
            self._fail("the child process answered nonsense")
        return header

    def _request(self, header: dict[str, Any], blobs: list[bytes], what: str) -> dict[str, Any]:
        proc = self._proc if self._proc is not None else self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(header).encode() + b"\n")
            for blob in blobs:
                proc.stdin.write(blob)
            proc.stdin.flush()
        except OSError:
            self._fail(f"the child process stopped reading ({what})")
        answer = self._read_header(self.wall_limit, what)
        if not answer.get("ok"):
            raise OrtChildError(_one_line(str(answer.get("error", "failed"))))
        return answer

    def run(self, model: bytes, inputs: dict[str, np.ndarray], output: str) -> np.ndarray:
        """``output`` of the serialized ``model`` on ``inputs`` (CPU, ORT_ENABLE_ALL)."""
        arrays = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        header = {
            "op": "run",
            "model": len(model),
            "output": output,
            "inputs": [
                {"name": k, "dtype": v.dtype.str, "shape": list(v.shape), "nbytes": v.nbytes}
                for k, v in arrays.items()
            ],
        }
        blobs = [model, *(v.tobytes() for v in arrays.values())]
        answer = self._request(header, blobs, "run")
        try:
            dtype = np.dtype(str(answer["dtype"]))
            shape = tuple(int(s) for s in answer["shape"])
            nbytes = int(answer["nbytes"])
        except (KeyError, TypeError, ValueError):
            self._fail("the child process answered nonsense")
        if dtype.kind not in "fiub" or nbytes != dtype.itemsize * int(np.prod(shape)):
            self._fail("the child process answered nonsense")
        data = self._read(nbytes, self.wall_limit, "output")
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def optimize(self, model: bytes, path: Path) -> None:
        """Save onnxruntime's optimized copy of ``model`` to ``path``
        (``SessionOptions.optimized_model_filepath``)."""
        header = {"op": "optimize", "model": len(model), "path": os.fspath(path)}
        self._request(header, [model], "optimize")


# ---- the child side ------------------------------------------------------------------------


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError
    return data


def _session(ort: Any, model: bytes, optimized: str | None = None) -> Any:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if optimized is not None:
        so.optimized_model_filepath = optimized
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _serve_one(ort: Any, header: dict[str, Any], stdin: IO[bytes]) -> tuple[dict[str, Any], bytes]:
    model = _read_exact(stdin, int(header["model"]))
    if header["op"] == "optimize":
        _session(ort, model, str(header["path"]))
        return {"ok": True}, b""
    feed = {}
    for spec in header["inputs"]:
        raw = _read_exact(stdin, int(spec["nbytes"]))
        feed[str(spec["name"])] = np.frombuffer(raw, np.dtype(spec["dtype"])).reshape(
            [int(s) for s in spec["shape"]]
        )
    try:
        (out,) = _session(ort, model).run([str(header["output"])], feed)
    except MemoryError:
        return {"ok": False, "error": "out of memory (the child's address-space limit)"}, b""
    arr = np.ascontiguousarray(out)
    answer = {"ok": True, "dtype": arr.dtype.str, "shape": list(arr.shape), "nbytes": arr.nbytes}
    return answer, arr.tobytes()


def main(argv: list[str]) -> int:
    """The child: limit itself, silence onnxruntime, serve requests until stdin closes."""
    limit = int(argv[0])
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # pragma: no cover - Linux enforces it
        pass  # an OS without RLIMIT_AS (macOS refuses it): the wall limit still holds
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever onnxruntime prints goes to the captured stderr
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    stdin = sys.stdin.buffer
    proto.write(_READY)
    proto.flush()
    while True:
        line = stdin.readline()
        if not line:
            return 0
        header = json.loads(line)
        try:
            answer, data = _serve_one(ort, header, stdin)
        except EOFError:
            return 0
        except Exception as exc:  # onnxruntime's refusal, sent back as one line
            answer, data = {"ok": False, "error": str(exc) or type(exc).__name__}, b""
        proto.write(json.dumps(answer).encode() + b"\n" + data)
        proto.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
