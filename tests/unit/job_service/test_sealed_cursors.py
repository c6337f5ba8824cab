"""A submitter's cursors (domain/changes.py, issue 42, point 13): the position sealed
for one reader, readable by this feed for that reader only, the same text for the
same position (a mark at a change equals the change's cursor), none of it a position."""

from __future__ import annotations

import secrets

import pytest

from san_jobs.job_service.domain.changes import (
    MAX_CURSOR_CHARS,
    NOT_A_CURSOR,
    FeedState,
    parse_cursor,
)

FEED = FeedState("a1b2c3d4e5f60718", 1_000, 10, cursor_key=secrets.token_hex(64))


def test_a_sealed_cursor_holds_its_position_for_its_reader_only() -> None:
    cursor = FEED.cursor(412, "alice")
    parsed = parse_cursor(cursor)
    assert (parsed.feed_id, parsed.pos) == (FEED.feed_id, None)
    # (Not "412" not in the text: a random key's ciphertext may spell it by chance,
    # as it once did in a fresh-clone run.)
    assert parsed.sealed is not None
    assert FEED.unseal(parsed.sealed, "alice") == 412
    assert FEED.cursor(412, "alice") == cursor  # a mark there is the same cursor
    assert FEED.cursor(413, "alice") != cursor
    assert len(FEED.cursor(2**63 - 1, "x" * 256)) <= MAX_CURSOR_CHARS
    with pytest.raises(ValueError, match="not a cursor"):
        FEED.unseal(parsed.sealed, "bob")
    other_feed = FeedState(FEED.feed_id, 1_000, 10, cursor_key=secrets.token_hex(64))
    with pytest.raises(ValueError, match="not a cursor"):
        other_feed.unseal(parsed.sealed, "alice")


@pytest.mark.parametrize(
    "text",
    [
        "a1b2~" + "A" * 31,
        "a1b2~" + "A" * 33,
        "a1b2~" + "*" * 32,
        "a1b2~" + "A" * 32 + ".5",
        "A1B2.5",
        "a1b2.05",
        "a1b2." + str(2**63),
        "x" * (MAX_CURSOR_CHARS + 1),
    ],
)
def test_what_is_not_a_cursors_shape_is_refused_in_words(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_cursor(text)
    assert str(refused.value) == NOT_A_CURSOR


def test_a_forged_seal_of_the_right_shape_is_refused() -> None:
    parsed = parse_cursor(f"{FEED.feed_id}~{'A' * 32}")
    assert parsed.sealed is not None
    with pytest.raises(ValueError, match="not a cursor"):
        FEED.unseal(parsed.sealed, "alice")


def test_a_feed_without_its_key_says_which_migration_is_missing() -> None:
    with pytest.raises(RuntimeError, match="0020"):
        FeedState("ab", 1, 0).cursor(1, "alice")
