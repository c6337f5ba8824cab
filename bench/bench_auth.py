"""The cost of the bearer-token check (--auth token) and of TLS on Enqueue, in one run.

Three real job-service processes on loopback, each on its own fresh database, the same
in every other respect: one with `--auth off` in plaintext, one with `--auth token`
(its token made by `job-service tokens create`), and one with `--auth token` over TLS
(certificates from scripts/dev_certs.py). Enqueue throughput with 64 concurrent callers is
measured on each in alternating rounds, so both see the same machine; the medians
and their ratio are printed. One worker per service, stuck on a slow gateway, so
claims do not compete with enqueues (as in bench_jobs.py).

Usage: python bench/bench_auth.py [--jobs N] [--rounds R] [--database sqlite|postgres]
Bounded: a fixed number of jobs per round; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench scripts run from a checkout: reuse the test helpers

from scripts.dev_certs import write_dev_certs  # noqa: E402
from tests.support.databases import create_temp_postgres_database, drop_database  # noqa: E402
from tests.support.processes import BIN, start_gateway, start_job_service  # noqa: E402

CALLERS = 64
TEXT = "Durable queues keep work safe. Workers claim jobs with leases. Failures are written down."


def card(i: int, prefix: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=f"{prefix}-{i}",
        card_analysis_input=pb.CardAnalysisInput(text=TEXT),
    )


MODES = ("off", "token", "tls+token")


def open_channel(address: str, ca: Path | None) -> grpc.aio.Channel:
    if ca is None:
        return grpc.aio.insecure_channel(address)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    # The development certificate names localhost, not 127.0.0.1's port address.
    return grpc.aio.secure_channel(address.replace("127.0.0.1", "localhost"), credentials)


async def enqueue_rate(
    address: str, count: int, prefix: str, token: str | None, ca: Path | None
) -> float:
    """Enqueues per second, CALLERS at a time, with `token` as bearer if given, over
    TLS trusting `ca` if given."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with open_channel(address, ca) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        await stub.Enqueue(card(0, f"warm-{prefix}"), metadata=metadata)
        next_index = 0

        async def caller() -> None:
            nonlocal next_index
            while next_index < count:
                i = next_index
                next_index += 1
                await stub.Enqueue(card(i, prefix), metadata=metadata)

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(CALLERS)))
        return count / (time.perf_counter() - started)


def create_token(database_url: str) -> str:
    result = subprocess.run(
        [
            str(BIN / "job-service"),
            "tokens",
            "create",
            "bench",
            "--role",
            "submitter",
            "--database-url",
            database_url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="enqueues per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-auth-") as folder:
        work = Path(folder)
        urls: dict[str, str] = {}
        made: list[str] = []
        for mode in MODES:
            if args.database == "postgres":
                urls[mode] = create_temp_postgres_database()
                made.append(urls[mode])
            else:
                urls[mode] = f"sqlite+aiosqlite:///{work / f'{mode}.db'}"
        # Made first: `tokens create` migrates the database the service then uses.
        bearer: dict[str, str | None] = {
            "off": None,
            "token": create_token(urls["token"]),
            "tls+token": create_token(urls["tls+token"]),
        }
        write_dev_certs(work / "certs")
        ca = work / "certs" / "ca.pem"
        tls_flags = {
            "off": ["--auth", "off"],
            "token": ["--auth", "token"],
            "tls+token": [
                "--auth",
                "token",
                "--tls-cert",
                str(work / "certs" / "job-service.pem"),
                "--tls-key",
                str(work / "certs" / "job-service-key.pem"),
            ],
        }
        gateway = start_gateway(work, "--backend", "instant", "--fault-latency", "30")
        services = {
            mode: start_job_service(
                work / mode,
                "--workers",
                "1",
                *tls_flags[mode],
                gateway=gateway.address,
                database_url=urls[mode],
            )
            for mode in MODES
        }
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        run: Callable[[str, int], float] = lambda mode, index: asyncio.run(  # noqa: E731
            enqueue_rate(
                services[mode].address,
                args.jobs,
                f"{index}",
                bearer[mode],
                ca if mode == "tls+token" else None,
            )
        )
        try:
            for index in range(args.rounds):
                order = MODES if index % 2 == 0 else tuple(reversed(MODES))
                for mode in order:
                    rates[mode].append(run(mode, index))
        finally:
            for service in (*services.values(), gateway):
                service.stop()
            for url in made:
                drop_database(url)
    medians = {mode: statistics.median(rates[mode]) for mode in MODES}
    print(f"Enqueue, {args.database}, {CALLERS} callers, {args.rounds} rounds of {args.jobs}:")
    for mode, label in zip(
        MODES,
        ("plaintext, --auth off", "plaintext, --auth token", "TLS, --auth token"),
        strict=True,
    ):
        rounds = [round(r) for r in rates[mode]]
        ratio = medians[mode] / medians["off"]
        print(f"  {label:24} {medians[mode]:8.0f} jobs/s  {ratio:5.2f} of plaintext off", end="")
        print(f"  (rounds: {rounds})")


if __name__ == "__main__":
    main()
