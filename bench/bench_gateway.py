"""AiGateway figures: the local backend's cost, and the cost of the transport per call.

The local backend's AnalyzeContent on ~1 KB and ~20 KB texts, two figures per size:
* in-process: the algorithms alone (summary + tags + embedding), one call at a time;
* gRPC loopback: a real gateway server on 127.0.0.1:0 in this process, called by an
  asyncio client with a few calls in flight.

The transport: a real ``ai-gateway --backend instant`` process (answers at once, so
what is left is gRPC and the gateway's own work per call), called with the same number
of calls in flight (64) as unary AnalyzeContent calls, then as calls on one StreamCalls
stream. For each: calls/s, and CPU µs per call of the gateway process (from
/proc/PID/stat) and of this client process.

Each local-backend measurement runs for a fixed time budget and the transport ones for
a fixed number of calls, so the script stops by itself in about a minute.
Usage: ``.venv/bin/python bench/bench_gateway.py [--seconds S] [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from san_jobs.ai_gateway.backends.local.backend import analyze_sync
from san_jobs.ai_gateway.models import AnalyzeInput
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2, ai_gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench scripts run from a checkout: reuse the test helpers

from tests.support.processes import start_gateway  # noqa: E402

IN_FLIGHT = 64
SHORT_TEXT = "Durable queues keep work safe. Workers claim jobs with leases."

PARAGRAPHS = [
    "A job queue stores background work in a database table, and each worker claims a job "
    "by updating its row inside a short transaction.",
    "PostgreSQL offers FOR UPDATE SKIP LOCKED, so many workers can claim jobs without "
    "blocking each other, while a lease with an expiry brings a job back when its worker dies.",
    "작업 큐는 데이터베이스 테이블에 백그라운드 작업을 저장하고, 각 워커는 트랜잭션 안에서 "
    "작업 행을 갱신하여 작업을 가져갑니다.",
    "The gateway honours the caller's deadline, limits the rate per caller and turns every "
    "failure into a gRPC status with rich details that the job service stores.",
    "To bake bread, mix flour, water, salt and yeast into a dough, knead it until smooth and "
    "let it rise in a warm place before it goes into a hot oven.",
]


def make_text(size: int) -> str:
    """A mixed English/Korean text of about ``size`` bytes (UTF-8)."""
    parts: list[str] = []
    i = 0
    while len(" ".join(parts).encode()) < size:
        parts.append(f"{PARAGRAPHS[i % len(PARAGRAPHS)]} (part {i})")
        i += 1
    return " ".join(parts)


def bench_in_process(text: str, seconds: float) -> tuple[int, float]:
    """(calls, elapsed) running the algorithms directly for about ``seconds``."""
    request = AnalyzeInput(text=text)
    analyze_sync(request)  # warm-up
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        analyze_sync(request)
        calls += 1
    return calls, time.perf_counter() - start


async def bench_grpc(text: str, seconds: float, in_flight: int = 4) -> tuple[int, float]:
    """(calls, elapsed) over real gRPC loopback with ``in_flight`` concurrent callers."""
    server = GatewayServer(GatewaySettings(listen="127.0.0.1:0", max_input_tokens=1_000_000))
    port = await server.start()
    request = ai_gateway_pb2.AnalyzeContentRequest(text=text)
    calls = 0
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)
            await stub.AnalyzeContent(request, timeout=30)  # warm-up
            start = time.perf_counter()
            stop_at = start + seconds

            async def caller() -> None:
                nonlocal calls
                while time.perf_counter() < stop_at:
                    await stub.AnalyzeContent(request, timeout=30)
                    calls += 1

            await asyncio.gather(*(caller() for _ in range(in_flight)))
            elapsed = time.perf_counter() - start
    finally:
        await server.stop(0)
    return calls, elapsed


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def unary_calls(stub: ai_gateway_pb2_grpc.AiGatewayServiceStub, count: int) -> None:
    """``count`` AnalyzeContent calls, IN_FLIGHT at a time."""
    request = ai_gateway_pb2.AnalyzeContentRequest(text=SHORT_TEXT)
    left = count

    async def caller() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await stub.AnalyzeContent(request, timeout=30)

    await asyncio.gather(*(caller() for _ in range(IN_FLIGHT)))


async def stream_calls(stub: ai_gateway_pb2_grpc.AiGatewayServiceStub, count: int) -> None:
    """``count`` AnalyzeContent calls on one StreamCalls stream, IN_FLIGHT at a time: each
    message of results is answered with one message starting as many new calls."""
    # On a grpc.aio channel the stub opens an aio call (the stubs' types say sync).
    stream: Any = stub.StreamCalls(metadata=(("x-client-id", "bench"),))
    request = ai_gateway_pb2.AnalyzeContentRequest(text=SHORT_TEXT)
    started = 0

    def calls(n: int) -> ai_gateway_pb2.StreamCallsRequest:
        nonlocal started
        batch = ai_gateway_pb2.StreamCallsRequest()
        for call_id in range(started, started + n):
            batch.calls.add(call_id=str(call_id), analyze_content=request)
        started += n
        return batch

    await stream.write(calls(min(IN_FLIGHT, count)))
    answered = 0
    while answered < count:
        message = await stream.read()
        answered += len(message.results)
        more = min(len(message.results), count - started)
        if more:
            await stream.write(calls(more))
    await stream.done_writing()
    await stream.read()  # the end of the stream (OK)


Run = Callable[[ai_gateway_pb2_grpc.AiGatewayServiceStub, int], Awaitable[None]]


async def measure(address: str, pid: int, run: Run, count: int) -> tuple[float, float, float]:
    """(calls/s, gateway CPU µs/call, client CPU µs/call) of ``run`` after a warm-up."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)
        await run(stub, min(count, 500))  # connect, warm caches
        gateway_cpu, client_cpu = _cpu_seconds(pid), time.process_time()
        start = time.perf_counter()
        await run(stub, count)
        elapsed = time.perf_counter() - start
        gateway_cpu = _cpu_seconds(pid) - gateway_cpu
        client_cpu = time.process_time() - client_cpu
    return count / elapsed, gateway_cpu / count * 1e6, client_cpu / count * 1e6


def bench_transport(count: int) -> None:
    """Unary calls against calls on one stream, same gateway process, same load."""
    with tempfile.TemporaryDirectory() as tmp:
        gateway = start_gateway(Path(tmp), "--backend", "instant")
        try:
            pid = gateway.proc.pid
            runs: list[tuple[str, Run]] = [("unary", unary_calls), ("StreamCalls", stream_calls)]
            for label, run in runs:
                figures = asyncio.run(measure(gateway.address, pid, run, count))
                per_s, gateway_us, client_us = figures
                print(
                    f"instant backend, {IN_FLIGHT} in flight, {label:<11}: {per_s:8.0f} calls/s  "
                    f"gateway CPU {gateway_us:6.1f} µs/call  client CPU {client_us:6.1f} µs/call"
                )
        finally:
            gateway.stop()


def main() -> None:
    """Run the benchmark and print one line per measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement")
    parser.add_argument("--calls", type=int, default=8000, help="calls per transport figure")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    bench_transport(args.calls)
    for label, size in (("1 KB", 1024), ("20 KB", 20 * 1024)):
        text = make_text(size)
        calls, elapsed = bench_in_process(text, args.seconds)
        print(
            f"{label:>5} ({len(text.encode()):>6} bytes) in-process : "
            f"{calls / elapsed:8.1f} calls/s  {elapsed / calls * 1000:7.2f} ms/call"
        )
        calls, elapsed = asyncio.run(bench_grpc(text, args.seconds))
        print(
            f"{label:>5} ({len(text.encode()):>6} bytes) gRPC x4    : "
            f"{calls / elapsed:8.1f} calls/s  {elapsed / calls * 1000:7.2f} ms/call (wall/calls)"
        )


if __name__ == "__main__":
    main()
