"""One definition of each idea both services and the clients share (issue 23, point 5):
a token file is read alike by job-service, jobsctl and san-web; a bearer header and a
peer's address mean the same to JobService and AiGateway. Each case here was read
differently by one of the former twins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from san_jobs.ai_gateway.callers import Authenticator
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.jobsctl._connection import SettingsError, resolve
from san_jobs.jobsctl.cli import build_parser
from san_jobs.shared.client_identity import bearer_token, peer_host
from san_jobs.web._job_service_link import LinkSettingsError, load_link


def _jobsctl_token(path: Path) -> str | None:
    return resolve(build_parser().parse_args(["--token-file", str(path), "stats"])).settings.token


def _job_service_token(path: Path) -> str | None:
    return JobServiceSettings(gateway_token_file=path).gateway_token()


def _san_web_token(path: Path) -> str | None:
    return load_link(
        target="127.0.0.1:50051", tls_ca=None, tls_cert=None, tls_key=None, token_file=path
    ).token


READERS: list[Callable[[Path], str | None]] = [_jobsctl_token, _job_service_token, _san_web_token]
REFUSED = (SettingsError, LinkSettingsError, ValueError)


@pytest.mark.parametrize("read", READERS, ids=["jobsctl", "job-service", "san-web"])
def test_every_program_reads_a_token_file_alike(
    tmp_path: Path, read: Callable[[Path], str | None]
) -> None:
    path = tmp_path / "token"
    path.write_text("  sjt_abc123\r\n")  # an editor's indentation and line end
    path.chmod(0o600)
    assert read(path) == "sjt_abc123"
    for content in ("sjt_abc 123\n", "sjt_äbc\n", "sjt\x00abc\n", "\n", "x" * 100_000 + " y"):
        path.write_text(content)
        with pytest.raises(REFUSED) as refused:
            read(path)
        assert "token file" in str(refused.value)
        if content.strip():  # the refusal never quotes the file
            assert content.strip() not in str(refused.value)


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ((), None),
        ((("authorization", "Bearer sjt_a"),), "sjt_a"),
        ((("Authorization", "bearer  sjt_a "),), "sjt_a"),
        ((("authorization", "Basic dXNlcg=="),), ""),  # a credential, never a valid one
        ((("x-other", "Bearer sjt_a"),), None),
    ],
)
def test_a_bearer_header_means_one_thing(
    metadata: tuple[tuple[str, str], ...], token: str | None
) -> None:
    assert bearer_token(metadata) == token


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:50000", "127.0.0.1"),
        ("ipv6:%5B::1%5D:50000", "::1"),
        ("ipv6:%5B::ffff:10.0.0.1%5D:1", "10.0.0.1"),
    ],
)
def test_the_gateway_names_an_unauthenticated_caller_as_job_service_does(
    peer: str, host: str
) -> None:
    context = SimpleNamespace(peer=lambda: peer)
    assert Authenticator().identify(context) == host  # type: ignore[arg-type]
    assert peer_host(peer) == host
