"""``ai-gateway`` as a real process: start, health, one call, SIGTERM, clean exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2, ai_gateway_pb2_grpc
from tests.support.fake_openai_server import FakeOpenAI
from tests.support.processes import running, start_gateway

BIN = Path(sys.executable).parent / "ai-gateway"
LISTENING = re.compile(
    r"ai-gateway listening on 127\.0\.0\.1:(\d+) \(plaintext, backend=local, event loop uvloop\)"
)


@pytest.mark.acceptance
def test_process_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "SAN_GATEWAY_CALL_LOG": str(tmp_path / "calls.jsonl")}
    with subprocess.Popen(
        [str(BIN), "--listen", "127.0.0.1:0", "--grace", "2"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        stderr = _exercise(proc)
    log = "".join(stderr)
    assert "AnalyzeContent caller=127.0.0.1 client=test job=j-1" in log
    assert "ai-gateway stopped" in log
    assert "Traceback" not in log
    assert '"job_id": "j-1"' in (tmp_path / "calls.jsonl").read_text()


def _exercise(proc: subprocess.Popen[str]) -> list[str]:
    """Wait for the listening line, check health and one call, SIGTERM, expect exit 0."""
    stderr: list[str] = []
    port: list[int] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr.append(line)
            match = LISTENING.search(line)
            if match:
                port.append(int(match.group(1)))
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert found.wait(20), "".join(stderr)
        with grpc.insecure_channel(f"127.0.0.1:{port[0]}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            check = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
            stub = ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)
            reply = stub.AnalyzeContent(
                ai_gateway_pb2.AnalyzeContentRequest(text="Queues hold jobs. Workers run them."),
                metadata=(("x-client-id", "test"), ("x-job-id", "j-1")),
                timeout=10,
            )
            assert 3 <= len(reply.tags) <= 8
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    return stderr


def test_port_in_use_is_one_line_exit_1() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run(
            [str(BIN), "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("ai-gateway: error:")


def test_the_api_key_comes_from_a_file_and_stays_out_of_ps(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    key = "sk-file-only-0123456789abcdef"
    key_file = tmp_path / "openai.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    args = ["--backend", "openai", "--openai-base-url", fake_openai.base_url]
    args += ["--openai-api-key-file", str(key_file)]
    with running(start_gateway(tmp_path, *args)) as gateway:
        # What `ps` shows of the process: its command line, which has no key in it.
        assert key not in Path(f"/proc/{gateway.proc.pid}/cmdline").read_text()
        with grpc.insecure_channel(gateway.address) as channel:
            stub = ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)
            reply = stub.AnalyzeContent(
                ai_gateway_pb2.AnalyzeContentRequest(text="Queues hold jobs."), timeout=10
            )
    assert reply.summary == "A fake summary."
    assert fake_openai.requests[-1][2]["authorization"] == f"Bearer {key}"
    assert key not in gateway.log()
