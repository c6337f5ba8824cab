"""A real Ctrl-C (SIGINT to a child process waiting on the sync SDK's `wait`) interrupts
the wait and the process ends cleanly. (Moved out of tests/unit/clients/
test_sdk_sync_client.py: it starts a Python process.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

CTRL_C = """
import sys, time
from san_jobs.client import CardAnalysisInput
from san_jobs.client.testing import FakeJobService

service = FakeJobService()
client = service.client()
job = client.enqueue("scrap-1", CardAnalysisInput(text="x")).job
print("waiting", flush=True)
started = time.monotonic()
try:
    client.wait(job.id)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.1f}s", flush=True)
client.close()
"""


def test_a_real_ctrl_c_interrupts_a_wait_and_the_process_ends() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal's child has it (ignored is inherited across exec).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 0, err
    assert out.startswith("interrupted after"), (out, err)
