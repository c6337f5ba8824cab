"""`make bench`: every benchmark in bench/, one after the other, printing figures.

Each script is bounded in job count and time and stops by itself; run one alone
with `.venv/bin/python bench/bench_jobs.py --help` for its options.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "bench_gateway.py",
    "bench_jobs.py",
    "bench_fanout.py",
    "bench_change_feed.py",
    "bench_priorities.py",
    "bench_dependencies.py",
    "bench_batch_decode.py",
]


def main() -> None:
    failed = []
    for script in SCRIPTS:
        print(f"\n### {script}", flush=True)
        if subprocess.run([sys.executable, str(HERE / script)], check=False).returncode != 0:
            failed.append(script)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
