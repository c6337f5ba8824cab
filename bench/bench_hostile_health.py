"""Memory of job-service and ai-gateway before and after 1,000 hostile health watches.

`grpc.health.v1.Health/Watch` needs no token (load balancers probe it), so anyone who
can reach a port can call it. Two real processes on loopback (the gateway with
`--caller-tokens-file`, job-service on SQLite) get, each:

* large names: Watch calls whose service name is megabytes long (as large as the
  service's message limit allows), in waves, each call cancelled once it is answered;
* unknown names: Watch calls for short names nobody registered, all left open at once
  (as many as the server admits), then cancelled.

The resident set size (VmRSS in /proc/PID/status) of each process is printed before,
at its peak during, and after the calls (after a short settle), with how each call
ended. With grpc's stock HealthServicer the large names leave hundreds of megabytes
behind; with san_jobs.shared.health a name over the bound is refused before it is kept.

Usage: python bench/bench_hostile_health.py [--large N] [--unknown N] [--wave W]
Bounded: a fixed number of calls to 127.0.0.1; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench scripts run from a checkout: reuse the test helpers

from tests.support.processes import RunningService, start_gateway, start_job_service  # noqa: E402

MIB = 1024 * 1024
# Each service's default --max-message-bytes, less room for the envelope.
LARGE_NAME_BYTES = {"job-service": 4 * MIB - 1024, "ai-gateway": 12 * MIB}
TOKEN_LINE = "bench-caller 0123456789abcdef0123456789abcdef\n"


def rss_mib(pid: int) -> float:
    """The process's resident set size in MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class PeakSampler:
    """Samples a process's RSS every 50 ms while the calls run; keeps the highest."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mib(pid)
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib(self.pid))
            await asyncio.sleep(0.05)

    def __enter__(self) -> PeakSampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def watch_once(
    stub: health_pb2_grpc.HealthStub, name: str, outcomes: collections.Counter[str]
) -> None:
    """One Watch, cancelled once the server has answered it (or ended it)."""
    call = stub.Watch(health_pb2.HealthCheckRequest(service=name), timeout=60)
    try:
        response = await call.read()
        outcomes[
            "answered " + health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        ] += 1
    except grpc.aio.AioRpcError as error:
        outcomes[error.code().name] += 1
    finally:
        call.cancel()


async def open_unknown(
    stub: health_pb2_grpc.HealthStub, count: int, outcomes: collections.Counter[str]
) -> None:
    """`count` Watch calls for unknown names, all open at once, then all cancelled."""
    calls = [
        stub.Watch(health_pb2.HealthCheckRequest(service=f"no.such.Service{i:06d}" + "x" * 180))
        for i in range(count)
    ]

    async def first(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
        try:
            response = await call.read()
            outcomes[
                "open " + health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
            ] += 1
        except grpc.aio.AioRpcError as error:
            outcomes[error.code().name] += 1

    await asyncio.gather(*(first(call) for call in calls))
    await asyncio.sleep(0.5)  # all held open at once
    for call in calls:
        call.cancel()


async def hostile(service: RunningService, large: int, unknown: int, wave: int) -> None:
    pid = service.proc.pid
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(service.address, options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        await asyncio.sleep(1.0)
        before = rss_mib(pid)
        outcomes: collections.Counter[str] = collections.Counter()
        started = time.perf_counter()
        with PeakSampler(pid) as sampler:
            name = "x" * LARGE_NAME_BYTES[service.name]
            for start in range(0, large, wave):
                batch = range(start, min(start + wave, large))
                await asyncio.gather(*(watch_once(stub, name, outcomes) for _ in batch))
            await open_unknown(stub, unknown, outcomes)
            await asyncio.sleep(1.0)  # cancellations reach the server; it frees what it can
        elapsed = time.perf_counter() - started
    # The hostile connection is gone; what stays is what the server kept (san_shared.
    # memory_return gives memory back up to five seconds after the last refusal).
    await asyncio.sleep(6.0)
    after = rss_mib(pid)
    async with grpc.aio.insecure_channel(service.address) as channel:  # still serving?
        alive = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
    print(
        f"{service.name:12s} RSS before {before:7.1f} MiB   peak {sampler.peak:7.1f} MiB   "
        f"after {after:7.1f} MiB   growth {after - before:+7.1f} MiB   "
        f"({large + unknown} calls in {elapsed:.1f} s; then Check: "
        f"{health_pb2.HealthCheckResponse.ServingStatus.Name(alive.status)})"
    )
    print(f"{'':12s} outcomes: {dict(sorted(outcomes.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", type=int, default=500, help="Watch calls with a huge name")
    parser.add_argument("--unknown", type=int, default=500, help="Watch calls left open")
    parser.add_argument("--wave", type=int, default=25, help="huge-name calls at once")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp)
        tokens = log_dir / "callers.txt"
        tokens.write_text(TOKEN_LINE)
        gateway = start_gateway(log_dir, "--caller-tokens-file", str(tokens))
        jobs = start_job_service(log_dir, gateway=gateway.address)
        try:
            for service in (jobs, gateway):
                asyncio.run(hostile(service, args.large, args.unknown, args.wave))
        finally:
            for service in (jobs, gateway):
                service.stop()


if __name__ == "__main__":
    main()
