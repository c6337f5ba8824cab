"""Issue 43: jobsctl speaks the pipeline. ``enqueue til-generation --after ID...``
needs no ``--note`` and ``enqueue recall-generation --after ID`` no ``--source-text``:
JobService takes them from the dependencies' results. Without --after (or in a
schedule, which has none) they are still required, named in a usage error."""

from __future__ import annotations

import argparse

import pytest

from san_jobs.client import CardAnalysisInput
from san_jobs.client.testing import FakeJobService
from san_jobs.jobsctl import _job_inputs, cli
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def enqueue_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["enqueue", *argv])


def test_a_til_after_its_cards_needs_no_note_and_a_recall_after_it_no_source() -> None:
    til = enqueue_args(
        "til-generation", "--target-id", "day", "--day", "2026-12-07",
        "--after", "a", "--after", "b",
    )  # fmt: skip
    assert til.depends_on == ["a", "b"]
    assert _job_inputs.enqueue_input(til) == pb.TilGenerationInput(day="2026-12-07")
    recall = enqueue_args(
        "recall-generation", "--target-id", "day", "--after", "t", "--question-count", "5"
    )  # fmt: skip
    assert _job_inputs.enqueue_input(recall) == pb.RecallGenerationInput(question_count=5)
    # Given too, they are sent along (JobService adds the dependencies' after them).
    both = enqueue_args(
        "til-generation", "--target-id", "day", "--day", "2026-12-07", "--note", "mine",
        "--after", "a",
    )  # fmt: skip
    assert _job_inputs.enqueue_input(both) == pb.TilGenerationInput(
        day="2026-12-07", notes=["mine"]
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["til-generation", "--target-id", "d", "--day", "2026-12-07"], "--note"),
        (["recall-generation", "--target-id", "d"], "--source-text"),
    ],
)
def test_without_after_the_note_or_source_is_still_required(argv: list[str], named: str) -> None:
    with pytest.raises(_job_inputs.InputError, match=f"^{named} is required .*--after"):
        _job_inputs.enqueue_input(enqueue_args(*argv))


def test_jobsctl_enqueues_the_pipeline_by_ids_alone(capsys: pytest.CaptureFixture[str]) -> None:
    service = FakeJobService()
    card = service.enqueue(
        pb.EnqueueRequest(
            target_id="s1",
            job_type=pb.JOB_TYPE_CARD_ANALYSIS,
            card_analysis_input=CardAnalysisInput(text="Queues."),
        )
    ).job.id
    with service.client() as client:
        til_args = enqueue_args(
            "til-generation", "--target-id", "day", "--day", "2026-12-07", "--after", card
        )  # fmt: skip
        assert cli.cmd_enqueue(client, til_args) == 0
        til = service.jobs[-1]
        recall_args = enqueue_args("recall-generation", "--target-id", "day", "--after", til.id)
        assert cli.cmd_enqueue(client, recall_args) == 0
    recall = service.jobs[-1]
    assert til.job_type == pb.JOB_TYPE_TIL_GENERATION and list(til.depends_on) == [card]
    assert list(til.til_generation_input.notes) == []
    assert recall.job_type == pb.JOB_TYPE_RECALL_GENERATION and list(recall.depends_on) == [til.id]
    assert til.id in capsys.readouterr().out


def test_the_cli_says_what_is_missing_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    service = FakeJobService()
    with service.client() as client, pytest.raises(cli.UsageError, match="--note is required"):
        cli.cmd_enqueue(
            client, enqueue_args("til-generation", "--target-id", "d", "--day", "2026-12-07")
        )
    assert service.jobs == []
