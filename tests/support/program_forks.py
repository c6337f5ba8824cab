"""Start the project's programs (job-service, ai-gateway, san-web) as forks of one
process per test process that has imported them already.

Why: the suite starts about 400 of these programs, and each start used to spend most
of its CPU importing (0.5 s for ai-gateway, 0.7 s for san-web, 0.6 s for job-service
on a 2-core machine), which made the suite CPU-bound. A fork of a process that did
those imports once is the same program: its own process and pid, its own sockets and
files, `main()` run with the test's argv, environment and working directory, its
output in the test's log file; kill -9, SIGTERM and exit statuses work as before.
What a fork skips is the interpreter start and the imports; the console scripts
themselves still run where that is what a test is about: the README's run command
(tests/acceptance/test_walking_skeleton.py, every program), ai-gateway's own process
test, job-service's flag and migrate commands, and every jobsctl run. SAN_TEST_EXEC=1
starts every program by its console script again.

This is the standard library's forkserver (`multiprocessing`, "forkserver" start
method): one server process per test process, started on first use. It only imports
modules: nothing in it has started gRPC, an event loop or a database connection, so
no lock is held by a thread the child does not have. Its one other thread is numpy's
OpenBLAS pool, which OpenBLAS itself stops and restarts around a fork.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from tests.support.ci import TRUE_WORDS

# The programs' modules and what their main() imports once its flags are read.
PRELOAD = (
    "san_jobs._console_scripts",
    "san_jobs.ai_gateway.cli",
    "san_jobs.ai_gateway.settings",
    "san_jobs.ai_gateway.server",
    "san_jobs.job_service.cli",
    "san_jobs.job_service.settings",
    "san_jobs.job_service.server",
    "san_jobs.web.cli",
    "uvloop",
    "aiosqlite",
    "asyncpg",
)
FORKED_COMMANDS = frozenset({"job-service", "ai-gateway", "san-web"})

_context: ForkServerContext | None = None


def forks_enabled() -> bool:
    """False when SAN_TEST_EXEC is set to a true-ish word (tests.support.ci's)."""
    return os.environ.get("SAN_TEST_EXEC", "").strip().lower() not in TRUE_WORDS


def _forkserver() -> ForkServerContext:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        _context = context
    return _context


def _text_stream(fd: int, mode: str, errors: str = "strict") -> io.TextIOWrapper:
    # write_through, as PYTHONUNBUFFERED=1 does for a started interpreter: every write
    # reaches the file at once, so a test reading it (the "listening on" line) sees it.
    return io.TextIOWrapper(
        io.FileIO(fd, mode, closefd=False), encoding="utf-8", errors=errors, write_through=True
    )


def _run_program(
    command: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    streams: tuple[str, str, str | None],
) -> None:
    """In the fork: become `command` run with `argv`, as its console script would,
    with standard output, error and input on the files `streams` names."""
    stdout_path, stderr_path, stdin_path = streams
    # The fork's name in ps and top: the program's, not the forkserver's.
    Path("/proc/self/comm").write_text(command[:15])
    for fd, path, flags in (
        (1, stdout_path, os.O_WRONLY | os.O_APPEND),
        (2, stderr_path, os.O_WRONLY | os.O_APPEND),
        (0, stdin_path or os.devnull, os.O_RDONLY),
    ):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdout = _text_stream(1, "w")
    sys.stderr = _text_stream(2, "w", errors="backslashreplace")
    sys.stdin = _text_stream(0, "r")
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = argv
    from san_jobs import _console_scripts

    program = next(p for p in _console_scripts.PROGRAMS if p.command == command)
    _console_scripts.run(program)


def _process(
    command_path: Path,
    args: Sequence[str],
    env: Mapping[str, str],
    streams: tuple[str, str, str | None],
) -> BaseProcess:
    return _forkserver().Process(
        target=_run_program,
        args=(command_path.name, [str(command_path), *args], dict(env), os.getcwd(), streams),
        name=command_path.name,
        # A program a test left running is ended with the test process, not waited for.
        daemon=True,
    )


class ForkedProcess:
    """The parts of `subprocess.Popen` the tests use, for a forked program."""

    def __init__(self, process: BaseProcess, args: Sequence[str]) -> None:
        self._process = process
        self.args = list(args)
        assert process.pid is not None
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_forked(
    command_path: Path, args: Sequence[str], env: Mapping[str, str], log_path: Path
) -> ForkedProcess:
    """Start the program `command_path` names (one of FORKED_COMMANDS) with `args`,
    its output (standard output and error) appended to `log_path`."""
    process = _process(command_path, args, env, (str(log_path), str(log_path), None))
    process.start()
    return ForkedProcess(process, [str(command_path), *args])


def run_forked(
    command_path: Path,
    args: Sequence[str],
    *,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run a command of a program (`san-web users create`, `job-service tokens
    create`) to its end, as `subprocess.run(..., capture_output=True, text=True)`
    does, for tests where the command only sets something up."""
    argv = [str(command_path), *args]
    if not forks_enabled():
        return subprocess.run(
            argv, input=input, env=env, timeout=timeout, capture_output=True, text=True, check=False
        )
    with tempfile.TemporaryDirectory() as folder:
        stdout, stderr, stdin = (Path(folder) / name for name in ("stdout", "stderr", "stdin"))
        stdout.write_bytes(b"")
        stderr.write_bytes(b"")
        stdin.write_text(input or "", encoding="utf-8")
        streams = (str(stdout), str(stderr), str(stdin))
        process = _process(command_path, args, os.environ if env is None else env, streams)
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(argv, timeout)
        return subprocess.CompletedProcess(
            argv,
            process.exitcode,
            stdout.read_text(encoding="utf-8"),
            stderr.read_text(encoding="utf-8"),
        )
