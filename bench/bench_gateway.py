"""AnalyzeContent throughput with the local backend, on ~1 KB and ~20 KB texts.

Two figures per size:
* in-process: the algorithms alone (summary + tags + embedding), one call at a time;
* gRPC loopback: a real gateway server on 127.0.0.1:0 in this process, called by an
  asyncio client with a few calls in flight.

Each measurement runs for a fixed time budget, so the whole script stops by itself in
well under a minute. Usage: ``.venv/bin/python bench/bench_gateway.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

import grpc
from san.aigateway.v1 import ai_gateway_pb2, ai_gateway_pb2_grpc

from ai_gateway.backends.local.backend import analyze_sync
from ai_gateway.models import AnalyzeInput
from ai_gateway.server import GatewayServer
from ai_gateway.settings import GatewaySettings

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


def main() -> None:
    """Run the benchmark and print one line per measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
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
