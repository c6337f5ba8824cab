import numpy as np
import pytest
from gateway_texts import EN_BREAD, EN_QUEUE, EN_QUEUE_2, KO_BREAD, KO_QUEUE, KO_QUEUE_2

from san_jobs.ai_gateway.backends.local.embed import DIMENSION, cosine, embed


@pytest.mark.parametrize("text", [EN_QUEUE, KO_BREAD, "the a of", "!!!", "x"])
def test_fixed_dimension_unit_length(text: str) -> None:
    vector = embed(text)
    assert vector.shape == (DIMENSION,)
    assert np.linalg.norm(vector) == pytest.approx(1.0)


def test_same_topic_is_closer_than_unrelated_english() -> None:
    same = cosine(embed(EN_QUEUE), embed(EN_QUEUE_2))
    unrelated = cosine(embed(EN_QUEUE), embed(EN_BREAD))
    assert same > 0.3
    assert same - unrelated > 0.25


def test_same_topic_is_closer_than_unrelated_korean() -> None:
    same = cosine(embed(KO_QUEUE), embed(KO_QUEUE_2))
    unrelated = cosine(embed(KO_QUEUE), embed(KO_BREAD))
    assert same > 0.3
    assert same - unrelated > 0.25


def test_particles_do_not_change_the_topic() -> None:
    a = embed("데이터베이스 트랜잭션 잠금")
    b = embed("데이터베이스에서 트랜잭션을 잠금으로")
    assert cosine(a, b) > 0.9


def test_deterministic_across_calls() -> None:
    assert np.array_equal(embed(EN_QUEUE), embed(EN_QUEUE))
