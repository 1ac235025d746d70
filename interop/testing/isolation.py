"""Run test cases in a child interpreter, so that a process abort fails one case, not the run.

Frameworks abort the whole process on some inputs (TensorFlow's `Check failed: IsAligned()`,
JAX's `std::bad_function_call`, torch on negative strides). A `Worker` keeps one child Python
process that imports frameworks once and runs cases one at a time, so that a case that kills
it is reported by name, with the signal and the tail of the child's stderr, and the next case
starts a fresh child. Cases are module-level functions, named by module and qualified name,
whose arguments and return values are JSON values.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RAISED = "raised"  # the case raised (an assertion or any other exception)
DIED = "died"  # the child process ended while running the case (abort, segfault, exit)
HUNG = "hung"  # the case ran past the timeout; the child was killed

#: stderr lines that never say why a process died: native stack frames as glog and absl
#: print them, and their informational start-up lines
_NOISE = re.compile(r"\s*@\s+0x[0-9a-f]+\s|I\d{4} |WARNING: All log messages before absl")
#: stderr lines that say why a process died
_CAUSE = re.compile(
    r"Check failed|terminate called|what\(\):|Segmentation fault|Fatal Python error|"
    r"Assertion .* failed|SIGSEGV|SIGABRT|double free|corrupted"
)
_CHILD = "from interop.testing.isolation import serve; serve({fd})"
#: a frame as faulthandler writes it, and as gdb does
_PY_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
_NATIVE_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?([^\s(]+)", re.M)
#: the C library's frames under every wait (futexes, condition variables): no information
_WAIT_INTERNALS = re.compile(r"_*(futex|pthread_cond|GI___futex|syscall$)")


@dataclass(frozen=True)
class Outcome:
    """What one case did in the child: its return value, or how it failed."""

    ok: bool
    value: Any = None
    failure: str = ""  # RAISED, DIED or HUNG
    error: str = ""  # one line: the exception, or the signal
    detail: str = ""  # the child's traceback, or the tail of its stderr

    def unwrap(self) -> Any:
        """The case's return value; AssertionError saying what happened if it failed."""
        if not self.ok:
            raise AssertionError(str(self))
        return self.value

    def __str__(self) -> str:
        if self.ok:
            return f"ok: {self.value!r}"
        return f"{self.failure}: {self.error}" + (f"\n{self.detail}" if self.detail else "")


def qualified_name(function: Callable[..., Any]) -> tuple[str, str, str]:
    """(module, its file, qualified name): how a child finds `function` (or a class)."""
    module = sys.modules[function.__module__]
    return function.__module__, getattr(module, "__file__", "") or "", function.__qualname__


def resolve(module_name: str, path: str, qualname: str) -> Any:
    """What `qualified_name` named, imported by module name, else from the module's file."""
    import importlib
    import importlib.util

    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if not path:
                raise
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def serve(fd: int) -> None:
    """The child's loop: one JSON request per line on stdin, one JSON reply per line on `fd`."""
    os.dup2(2, 1)  # frameworks print to stdout; the replies have their own pipe
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where a hung case is stuck
    replies = os.fdopen(fd, "w")
    for line in sys.stdin:
        module_name, path, qualname, args = json.loads(line)
        try:
            value = resolve(module_name, path, qualname)(*args)
            reply = {"ok": True, "value": value}
        except BaseException as exc:  # pytest's failures are BaseExceptions too
            reply = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "detail": traceback.format_exc(limit=-8),
            }
        replies.write(json.dumps(reply, default=repr) + "\n")
        replies.flush()


def _native_stacks(pid: int) -> list[str]:
    """Each thread's native frames, by function, as gdb reads them from process `pid`; none
    where gdb is not installed or cannot attach."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return []
    try:
        out = subprocess.run(
            [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 16"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    threads = []
    for block in re.split(r"\n(?=Thread \d+ )", out)[1:]:
        names = []
        for name in _NATIVE_FRAME.findall(block):
            if name.startswith(("_PyEval_EvalFrame", "_PyEval_Vector")):
                break  # the interpreter: its Python frames are in the other section
            if name != "??" and not _WAIT_INTERNALS.match(name) and name not in names:
                names.append(name)
        threads.append(" < ".join(names[:10]) or "(no symbol)")
    return threads


def _counted(lines: list[str]) -> str:
    """`lines`, each once, prefixed by how many times it occurred where more than once."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return "\n".join(f"{n} x {line}" if n > 1 else line for line, n in counts.items())


class Worker:
    """One child interpreter running cases on request; restarted after it dies or hangs."""

    def __init__(self, *, timeout: float = 300.0, env: dict[str, str] | None = None) -> None:
        self.timeout = timeout
        self.env = env
        self.starts = 0  # how many children were started (the first, then one per death)
        self._proc: subprocess.Popen[bytes] | None = None
        self._replies = -1
        self._stderr: Any = None
        self._buffer = b""

    def _start(self) -> None:
        read, write = os.pipe()
        env = {**os.environ, **(self.env or {})}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        # The child appends (O_APPEND) and this side reads through its own file object, so
        # neither moves the other's offset.
        self._stderr = tempfile.NamedTemporaryFile(prefix="interop-worker-", suffix=".err")
        with open(self._stderr.name, "ab") as child_stderr:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD.format(fd=write)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=child_stderr,
                pass_fds=(write,),
                env=env,
            )
        os.close(write)
        self._replies = read
        self._buffer = b""
        self.starts += 1

    def call(self, function: Callable[..., Any], *args: Any) -> Outcome:
        """Run `function(*args)` in the child and say what happened."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        stderr_at = self._stderr.seek(0, os.SEEK_END)
        request = json.dumps([*qualified_name(function), list(args)]) + "\n"
        try:
            self._proc.stdin.write(request.encode())
            self._proc.stdin.flush()
            line = self._read_line(time.monotonic() + self.timeout)
        except BrokenPipeError:
            line = b""
        if line is None:
            native = _native_stacks(self._proc.pid)  # first: gdb stops it while it reads
            self._proc.send_signal(signal.SIGUSR1)  # its threads' Python stacks, to stderr
            time.sleep(1)
            self._kill()
            return Outcome(
                False,
                failure=HUNG,
                error=f"no answer in {self.timeout:.0f} s; killed",
                detail=self._stacks(stderr_at, native),
            )
        if not line:
            return Outcome(False, failure=DIED, error=self._death(), detail=self._tail(stderr_at))
        reply = json.loads(line)
        if reply["ok"]:
            return Outcome(True, reply["value"])
        return Outcome(False, failure=RAISED, error=reply["error"], detail=reply["detail"])

    def _read_line(self, deadline: float) -> bytes | None:
        """One reply line; b"" when the child closed the pipe, None on timeout."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                return None
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                return b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _death(self) -> str:
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._kill()
            return "the worker closed its pipe and did not exit; killed"
        if code < 0:
            return f"the process died of {signal.Signals(-code).name} while running this case"
        return f"the process exited with status {code} while running this case"

    def _tail(self, since: int, lines: int = 6) -> str:
        """The child's last words since `since`: the lines that say why a process dies
        ("Check failed: ...", "terminate called ..."), then its last lines, without native
        stack frames and start-up chatter (signal handlers print a lot after the cause)."""
        self._stderr.seek(since)
        text = self._stderr.read().decode(errors="replace")
        kept = [line for line in text.splitlines() if line.strip() and not _NOISE.match(line)]
        causes = [line for line in kept if _CAUSE.search(line)][:4]
        return "\n".join(dict.fromkeys(causes + kept[-lines:]))

    def _stacks(self, since: int, native: list[str]) -> str:
        """Where a hung child's threads were: one line a thread, innermost frame first and
        identical stacks counted once, so that every thread fits in a CI log: the Python
        frames faulthandler wrote, then the native ones gdb read (which thread holds what
        the others wait for: the GIL, a framework's lock)."""
        self._stderr.seek(since)
        text = self._stderr.read().decode(errors="replace")
        found = re.search(r"(Current thread|Thread) 0x", text)
        if not found:
            return self._tail(since)
        python = []
        for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text[found.start() :]):
            frames = [
                f"{os.path.basename(path)}:{line} {function}"
                for path, line, function in _PY_FRAME.findall(block)
                if not path.endswith("threading.py")
            ]
            python.append(" < ".join(frames) or "(no Python frame)")
        report = "Python stacks, innermost first:\n" + _counted(python)
        if native:
            report += "\nnative stacks (gdb), innermost first:\n" + _counted(native)
        return report

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def close(self) -> None:
        """End the child (it exits when its stdin closes) and free the pipes."""
        if self._proc is not None:
            if self._proc.stdin is not None:
                try:
                    self._proc.stdin.close()
                except BrokenPipeError:
                    pass
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._kill()
            self._proc = None
        if self._replies >= 0:
            os.close(self._replies)
            self._replies = -1
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
