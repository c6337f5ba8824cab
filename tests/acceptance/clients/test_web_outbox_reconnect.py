"""The outbox notices JobService is back within 5 s (issue 22, point 16), with real
processes: JobService is killed (-9), scraps are taken meanwhile, san-web is killed
(-9) and restarted while JobService stays down, and JobService comes back on its
address after the relay's (and its channel's) backoff has grown.

san-web runs with its default relay settings (the point is about them). The test
needs about 30 s: JobService stays down DOWN_SECONDS, because gRPC's reconnect
backoff grows 1.6 times per failed attempt from 1 s and passes 5 s only after about
10 s of failed attempts; after 20 s, without a cap, the next attempt may be 10 s away.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from conftest import _stop, start_web
from test_web_outbox import _free_address, _job_service, gateway, post_scraps, wait_for_jobs

from tests.support.processes import RunningService

__all__ = ["gateway"]  # the fixture, shared with test_web_outbox

DOWN_SECONDS = 20.0
SCRAPS = 20


def test_scraps_taken_while_job_service_was_down_are_delivered_within_5_s_of_its_return(
    tmp_path: Path, gateway: RunningService
) -> None:
    address = _free_address()
    job_service = _job_service(tmp_path / "js-0", gateway, address)
    web = start_web(tmp_path, address)
    try:
        base = f"http://{web.address}"
        # A scrap delivered first: the relay's channel was connected when JobService died.
        (warm,) = post_scraps(base, 1)
        wait_for_jobs(address, [warm])
        job_service.kill()
        scrap_ids = post_scraps(base, SCRAPS)
        web.kill()  # kill -9 with the rows queued; the new relay starts from them
        web = start_web(tmp_path, address)
        base = f"http://{web.address}"
        time.sleep(DOWN_SECONDS)  # the condition under test: a long enough outage
        first = httpx.get(f"{base}/api/scraps/{scrap_ids[0]}", timeout=10).json()
        assert first["state"] == "queued", first

        job_service = _job_service(tmp_path / "js-1", gateway, address)
        back_at = datetime.now(UTC)  # its "listening on" line has been printed
        jobs = wait_for_jobs(address, scrap_ids)
        assert all(scrap in jobs for scrap in scrap_ids), "not every scrap was delivered"
        last_created = max(jobs[s][0].create_time.ToDatetime(UTC) for s in scrap_ids)
        late = (last_created - back_at).total_seconds()
        print(f"JobService back after {DOWN_SECONDS:g} s -> last of {SCRAPS} jobs: {late:.2f} s")
        assert late < 5.0, f"the last scrap was delivered {late:.2f} s after JobService was back"
    finally:
        _stop(web)
        _stop(job_service)
