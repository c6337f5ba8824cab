"""`jobsctl usage` against real processes (ai-gateway with the local backend and
job-service with --auth token over mutual TLS): the usage of finished attempts, summed
by type, model and caller; a submitter sees only its own; the table prints."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from _certs import write_test_certs
from test_jobsctl_real_tls import SecureJobService, _create_token
from test_jobsctl_tls import jobsctl

from san_jobs.ai_gateway.backends.local.backend import MODEL as LOCAL_MODEL
from tests.support.processes import running, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance


@pytest.fixture(scope="module")
def usage_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureJobService]:
    folder = tmp_path_factory.mktemp("usage-job-service")
    folder.chmod(0o700)
    certs = write_test_certs(folder / "certs")
    database_url = f"sqlite+aiosqlite:///{folder / 'jobs.db'}"
    tokens = {
        role: _create_token(database_url, f"{role}-1", role, folder)
        for role in ("operator", "submitter")
    }
    tls = ["--tls-cert", str(certs / "job-service.pem")]
    tls += ["--tls-key", str(certs / "job-service-key.pem")]
    tls += ["--tls-client-ca", str(certs / "ca.pem"), "--auth", "token"]
    with running(start_gateway(folder)) as gateway:
        service = start_job_service(
            folder, *tls, gateway=gateway.address, database_url=database_url
        )
        with running(service):
            yield SecureJobService(service, certs, tokens)


def run_job(flags: list[str], kind: str, target: str, *args: str) -> None:
    enqueued = jobsctl(*flags, "enqueue", kind, "--target-id", target, *args)
    assert enqueued.returncode == 0, enqueued.stderr
    watched = jobsctl(*flags, "watch", enqueued.stdout.strip(), "--wait-timeout", "60", "--json")
    assert watched.returncode == 0, watched.stderr
    assert "COMPLETED" in watched.stdout, watched.stdout


def test_usage_sums_by_type_model_and_caller(usage_service: SecureJobService) -> None:
    operator, submitter = usage_service.flags("operator"), usage_service.flags("submitter")
    run_job(operator, "card-analysis", "u-1", "--text", "Queues hold jobs. Workers run them.")
    run_job(operator, "card-analysis", "u-2", "--text", "Leases expire when workers die.")
    run_job(submitter, "embedding", "u-3", "--text", "Embeddings are vectors.")

    result = jobsctl(*operator, "usage", "--since", "1h", "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    groups = {(t["jobType"], t["requestedBy"]): t for t in body["totals"]}
    assert set(groups) == {("CARD_ANALYSIS", "operator-1"), ("EMBEDDING", "submitter-1")}
    cards = groups[("CARD_ANALYSIS", "operator-1")]
    assert (cards["model"], cards["attempts"]) == (LOCAL_MODEL, 2)
    assert cards["inputTokens"] > 0 and cards["outputTokens"] > 0
    assert groups[("EMBEDDING", "submitter-1")]["outputTokens"] == 0
    assert body["truncated"] is False

    # A submitter sees its own jobs' usage only; --type narrows.
    own = json.loads(jobsctl(*submitter, "usage", "--json").stdout)
    assert [t["requestedBy"] for t in own["totals"]] == ["submitter-1"]
    typed = json.loads(jobsctl(*operator, "usage", "--type", "embedding", "--json").stdout)
    assert [t["jobType"] for t in typed["totals"]] == ["EMBEDDING"]

    table = jobsctl(*operator, "usage", "--since", "2h", env={"COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert "operator-1" in table.stdout and LOCAL_MODEL in table.stdout
    assert "input tokens" in table.stdout and "all" in table.stdout


def test_a_reversed_range_is_a_usage_error(usage_service: SecureJobService) -> None:
    result = jobsctl(*usage_service.flags("operator"), "usage", "--since", "1h", "--until", "2h")
    assert result.returncode != 0
    assert "start_time" in result.stderr, result.stderr
