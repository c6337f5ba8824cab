"""Dependencies on the client side: the SDK's `depends_on` on both clients, and the
fake doing what JobService does with it (a job waits for its dependencies, runs once
they are COMPLETED, is CANCELLED naming one that failed; unknown ids and repeats are
refused naming depends_on[i])."""

from __future__ import annotations

import pytest

from san_jobs.client import CardAnalysisInput, InvalidRequestError, TilGenerationInput, testing
from san_jobs.client.testing import FakeJobService
from san_jobs.job_service.domain.dependencies import MAX_DEPENDENCY_DEPTH
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

CARD = CardAnalysisInput(text="x")
TIL = TilGenerationInput(day="2026-12-04", notes=["a note"])


def test_a_job_waits_for_its_dependencies_then_runs() -> None:
    service = FakeJobService()
    with service.client() as client:
        first = client.enqueue("a", CARD).job
        second = client.enqueue("b", CARD).job
        til = client.enqueue("day", TIL, depends_on=[first.id, second.id]).job
        assert list(til.depends_on) == [first.id, second.id]
        assert til.waiting_for.reason == pb.PAUSE_REASON_DEPENDENCIES
        assert list(til.waiting_for.job_ids) == [first.id, second.id]
        service.complete(second.id, pb.CardAnalysisResult(summary="B."))
        assert list(client.get_job(til.id).waiting_for.job_ids) == [first.id]
        service.complete(first.id, pb.CardAnalysisResult(summary="A."))
        due = client.get_job(til.id)
        assert due.status == pb.JOB_STATUS_PENDING and not due.HasField("waiting_for")


async def test_the_async_client_sends_it() -> None:
    service = FakeJobService()
    async with service.async_client() as client:
        card = (await client.enqueue("a", CARD)).job
        til = (await client.enqueue("day", TIL, depends_on=[card.id])).job
    assert list(til.depends_on) == [card.id]


def test_a_failed_dependency_cancels_its_dependents_and_theirs() -> None:
    service = FakeJobService()
    with service.client() as client:
        card = client.enqueue("a", CARD).job
        til = client.enqueue("day", TIL, depends_on=[card.id]).job
        after = client.enqueue("b", CARD, depends_on=[til.id]).job
        service.fail(card.id, "refused")
        ended = client.get_job(til.id)
        assert ended.status == pb.JOB_STATUS_CANCELLED
        assert ended.error_message == f"Dependency {card.id} FAILED"
        assert client.get_job(after.id).error_message == f"Dependency {til.id} CANCELLED"
        late = client.enqueue("late", TIL, depends_on=[card.id]).job
        assert late.status == pb.JOB_STATUS_CANCELLED


def test_the_fake_refuses_unknown_and_repeated_ids_naming_them() -> None:
    service = FakeJobService()
    with service.client() as client:
        card = client.enqueue("a", CARD).job
        unknown = "00000000-0000-4000-8000-000000000000"
        with pytest.raises(InvalidRequestError) as caught:
            client.enqueue("day", TIL, depends_on=[card.id, unknown])
        assert [v.field for v in caught.value.field_violations] == ["depends_on[1]"]
        with pytest.raises(InvalidRequestError) as caught:
            client.enqueue("day", TIL, depends_on=[card.id, card.id])
        assert [v.field for v in caught.value.field_violations] == ["depends_on[1]"]


def test_jobsctl_enqueue_after_and_get_show_the_wait(capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from rich.console import Console

    from san_jobs.jobsctl import _render, cli
    from san_jobs.shared.display import waiting_text

    service = FakeJobService()
    with service.client() as client:
        card = client.enqueue("a", CARD).job
        args = cli.build_parser().parse_args(
            ["enqueue", "embedding", "--target-id", "e", "--text", "x", "--after", card.id]
        )
        assert cli.cmd_enqueue(client, args) == 0
        (job,) = [j for j in client.list_jobs().jobs if j.id != card.id]
    assert list(job.depends_on) == [card.id]
    assert waiting_text(job.waiting_for) == f"waiting for 1 job it depends on: {card.id}"
    out = io.StringIO()
    _render.job_detail(Console(file=out, width=200), job)
    shown = out.getvalue()
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in shown.splitlines()}
    assert rows["depends on"] == card.id
    assert rows["waiting"] == f"waiting for 1 job it depends on: {card.id}"
    assert "provider" not in shown  # not a pause of its type


def test_the_fake_bounds_a_chain_as_jobservice_does() -> None:
    service = FakeJobService()
    with service.client() as client:
        previous = client.enqueue("root", CARD).job.id
        for index in range(MAX_DEPENDENCY_DEPTH):
            previous = client.enqueue(f"link{index}", CARD, depends_on=[previous]).job.id
        with pytest.raises(InvalidRequestError) as caught:
            client.enqueue("deep", CARD, depends_on=[previous])
    (violation,) = caught.value.field_violations
    assert violation.field == "depends_on[0]"
    assert f"at most {MAX_DEPENDENCY_DEPTH} deep" in violation.description
    assert testing.MAX_DEPENDENCY_DEPTH == MAX_DEPENDENCY_DEPTH  # JobService's bound
