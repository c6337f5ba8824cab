"""`make run`: AiGateway, JobService (SQLite under ./var/) and, when installed,
the san-web page, side by side. Prints where each listens; Ctrl-C stops all.

Each service reads its own environment variables (SAN_GATEWAY_*, SAN_JOBS_*,
SAN_WEB_*), so `SAN_GATEWAY_FAULT_UNAVAILABLE_RATE=1.0 make run` is a bad day.

Each service is a child process with its own console script; their logs are
interleaved here, each line prefixed with the service's name.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on (\S+)")
METRICS = re.compile(r"metrics at (\S+)")
# Where each service serves Prometheus metrics, unless its variable says otherwise.
METRICS_PORTS = {
    "ai-gateway": ("SAN_GATEWAY_METRICS_LISTEN", "127.0.0.1:9465"),
    "job-service": ("SAN_JOBS_METRICS_LISTEN", "127.0.0.1:9464"),
}
# Each service's /metrics URL, from its "metrics at URL" line.
metrics_urls: dict[str, str] = {}


def _pump(name: str, proc: subprocess.Popen[str], ready: threading.Event, where: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(f"{name:>11} | {line}")
        sys.stdout.flush()
        metrics = METRICS.search(line)
        if metrics:
            metrics_urls[name] = metrics.group(1)
        match = LISTENING.search(line)
        if match and not ready.is_set():
            where.append(match.group(1))
            ready.set()
    ready.set()


def with_metrics(name: str, argv: list[str]) -> list[str]:
    """`argv` serving metrics on the service's fixed local port, unless its
    environment variable chooses (then the service reads it itself)."""
    variable, listen = METRICS_PORTS[name]
    return argv if os.environ.get(variable) else [*argv, "--metrics-listen", listen]


def start(name: str, argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [str(BIN / argv[0]), *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # Ctrl-C reaches us; we stop the children in order
    )
    ready = threading.Event()
    where: list[str] = []
    threading.Thread(target=_pump, args=(name, proc, ready, where), daemon=True).start()
    ready.wait(60)
    if not where:
        proc.wait(5)
        raise SystemExit(f"{name} did not start (exit code {proc.returncode}); see its lines above")
    return proc, where[0]


def stop(procs: list[tuple[str, subprocess.Popen[str]]]) -> None:
    for name, proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(45)
            except subprocess.TimeoutExpired:
                print(f"{name} did not stop in time; killing it", file=sys.stderr)
                proc.kill()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def make_var_folder(root: Path = ROOT) -> Path:
    """./var/ for the databases, private to its owner (0700) as the services want
    the folders of their SQLite files: they warn about one others can read. A folder
    that exists already is left as its owner made it."""
    folder = root / "var"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        return folder
    folder.chmod(0o700)  # mkdir's mode passes through the umask
    return folder


def main() -> None:
    make_var_folder()
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    # Ctrl-C (SIGINT) and SIGTERM both stop everything in order. SIGINT is set
    # explicitly: a shell starting us in the background may have ignored it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        gateway, gateway_at = start("ai-gateway", with_metrics("ai-gateway", ["ai-gateway"]))
        procs.append(("ai-gateway", gateway))
        database = os.environ.get("SAN_JOBS_DATABASE_URL", "sqlite+aiosqlite:///var/jobs.db")
        jobs, jobs_at = start(
            "job-service", with_metrics("job-service", ["job-service", "--gateway", gateway_at])
        )
        procs.append(("job-service", jobs))
        lines = [
            f"AiGateway  (gRPC)  {gateway_at}  built-in local models",
            f"JobService (gRPC)  {jobs_at}  database {database}",
        ]
        for name, shown in (("ai-gateway", "AiGateway "), ("job-service", "JobService")):
            if name in metrics_urls:
                lines.append(f"{shown} (HTTP)  {metrics_urls[name]}  Prometheus metrics")
        if shutil.which("san-web", path=str(BIN)):
            web, web_at = start("san-web", ["san-web", "--job-service", jobs_at])
            procs.append(("san-web", web))
            lines.append(f"san-web    (HTTP)  {web_at}  open it in a browser")
        print("\n".join(["", "san-jobs is running:", *("  " + s for s in lines)]))
        print(f'  try: {BIN}/jobsctl enqueue card-analysis --target-id scrap-1 --text "..."')
        print("Press Ctrl-C to stop.\n", flush=True)
        while all(p.poll() is None for _, p in procs):
            try:
                procs[0][1].wait(0.5)
            except subprocess.TimeoutExpired:
                continue
        print("a service exited; stopping the others", file=sys.stderr)
    except KeyboardInterrupt:
        print("\nstopping...", flush=True)
    finally:
        stop(procs)
    codes = {name: p.returncode for name, p in procs}
    print("stopped: " + ", ".join(f"{n} (exit {c})" for n, c in codes.items()))


if __name__ == "__main__":
    main()
