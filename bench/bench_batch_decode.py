"""BatchEnqueue's per-item decoding (issue 15, issue 44 point 4): the time
transport/batch.decode takes for a 500-item request, in microseconds per item, with
and without the authenticated caller and the call's traceparent set on each item.

Usage: python bench/bench_batch_decode.py [--items N] [--repeat R]
In-process, no server: the best of R timed rounds, each decoding the whole request
once, so a noisy neighbour (a shared machine) shows as spread, not as a slower figure.
"""

from __future__ import annotations

import argparse
import timeit

from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport import batch
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

TEXT = "A page about queues: leases, fencing tokens and retries. " * 8
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def request(items: int) -> pb.BatchEnqueueRequest:
    """Card analyses, every other one with a request_id, every tenth urgent."""
    return pb.BatchEnqueueRequest(
        requests=[
            pb.EnqueueRequest(
                job_type=pb.JOB_TYPE_CARD_ANALYSIS,
                target_id=f"card-{i}",
                requested_by="bench",
                request_id=f"rq-{i}" if i % 2 else "",
                priority=1 if i % 10 == 0 else 0,
                card_analysis_input=pb.CardAnalysisInput(text=TEXT),
            )
            for i in range(items)
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    message = request(args.items)
    limits = EnqueueLimits()
    loops = 1
    for label, caller, traceparent in (
        ("--auth off, no trace", None, None),
        ("caller and traceparent", "alice-svc", TRACEPARENT),
    ):

        def run(caller: str | None = caller, traceparent: str | None = traceparent) -> None:
            batch.decode(
                message,
                limits,
                3,
                requested_by=caller,
                traceparent=traceparent,
                answer_budget_bytes=64 * 1024 * 1024,
            )

        best = min(timeit.repeat(run, number=loops, repeat=args.repeat))
        per_item = best / loops / args.items * 1e6
        print(f"{label:<24} {per_item:6.2f} µs per item ({args.items} items)")


if __name__ == "__main__":
    main()
