"""shared/grpc_server.py, the start both gRPC servers share: a taken port, an exposed
listen address and missing TLS files are each one StartupError line."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from san_jobs.shared.grpc_server import StartupError, bind, check_exposure, server_tls


async def test_a_taken_port_is_a_startup_error_naming_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        server = grpc.aio.server()
        try:
            with pytest.raises(StartupError, match=f"^cannot listen on {address}"):
                bind(server, address, None)
        finally:
            await server.stop(None)


async def test_a_free_port_is_bound() -> None:
    server = grpc.aio.server()
    try:
        assert bind(server, "127.0.0.1:0", None) > 0
    finally:
        await server.stop(None)


def test_exposure_and_tls_files(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"0\.0\.0\.0:50051"):
        check_exposure("0.0.0.0:50051", None, tls=False, authenticated=False, insecure=False)
    check_exposure("127.0.0.1:50051", None, tls=False, authenticated=False, insecure=False)
    check_exposure("0.0.0.0:50051", None, tls=False, authenticated=False, insecure=True)
    assert server_tls(None, None, None) is None
    with pytest.raises(StartupError, match="cannot read"):
        server_tls(tmp_path / "missing.pem", tmp_path / "missing-key.pem", None)
