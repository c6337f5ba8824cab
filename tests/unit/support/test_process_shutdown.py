"""tests.support.processes: stopping a service process is part of the test. One that
outlives SIGTERM, or exits with a status it should not, fails the test with the end of
its output; one the test killed on purpose does not."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.processes import RunningService, running, start_service, stop_all

# A stand-in service: says it listens once its SIGTERM handling is in place, then waits.
SERVICE = """\
import signal, sys, time
ON_SIGTERM = {on_sigterm!r}
def on_sigterm(*_):
    print("stopping: " + ON_SIGTERM, file=sys.stderr, flush=True)
    sys.exit(0 if ON_SIGTERM == "exit 0" else 3)
if ON_SIGTERM == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_sigterm)
print("listening on 127.0.0.1:1", flush=True)
time.sleep(60)
"""


def fake_service(tmp_path: Path, on_sigterm: str) -> RunningService:
    """ "exit 0", "exit 3" (its shutdown fails) or "ignore" (it hangs) on SIGTERM."""
    script = SERVICE.format(on_sigterm=on_sigterm)
    return start_service("fake", ["python", "-c", script], tmp_path, timeout=20)


def test_a_clean_exit_passes(tmp_path: Path) -> None:
    with running(fake_service(tmp_path, "exit 0")) as service:
        pass
    assert service.proc.returncode == 0


def test_a_failed_shutdown_fails_the_test_with_its_output(tmp_path: Path) -> None:
    service = fake_service(tmp_path, "exit 3")
    with (
        pytest.raises(AssertionError, match="fake exited with status 3, not 0") as caught,
        running(service),
    ):
        pass
    assert "stopping: exit 3" in str(caught.value)  # its stderr, in the message


def test_a_hung_shutdown_fails_the_test_and_is_killed(tmp_path: Path) -> None:
    service = fake_service(tmp_path, "ignore")
    with (
        pytest.raises(AssertionError, match=r"fake did not exit within 0\.5s") as caught,
        running(service, timeout=0.5),
    ):
        pass
    assert "listening on" in str(caught.value)
    assert service.proc.returncode == -signal.SIGKILL


def test_a_service_the_test_killed_passes(tmp_path: Path) -> None:
    with running(fake_service(tmp_path, "ignore")) as service:
        service.kill()


def test_the_tests_own_failure_stands_with_the_shutdown_problem_as_a_note(
    tmp_path: Path,
) -> None:
    service = fake_service(tmp_path, "exit 3")
    with pytest.raises(ValueError, match="the test's own") as caught, running(service):
        raise ValueError("the test's own failure")
    assert any("fake exited with status 3" in note for note in caught.value.__notes__)


def test_stop_all_stops_every_one_then_fails(tmp_path: Path) -> None:
    bad, good = fake_service(tmp_path, "exit 3"), fake_service(tmp_path, "exit 0")
    with pytest.raises(AssertionError, match="status 3"):
        stop_all(bad, good)
    assert good.proc.returncode == 0
