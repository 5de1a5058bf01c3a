"""Which comment is the sticky one: each selection key tested apart, holding the others equal.

Keys, strongest first: the marker on the first line (vs quoted elsewhere), a bot author (vs a
person), the most recent ``created_at``, the highest id.
"""

from __future__ import annotations

import pytest

from observer_ci.github import MARKER, marker_rank, select_sticky_comment

OLD, NEW = "2024-01-01T00:00:01Z", "2024-01-01T00:00:09Z"
FIRST_LINE = f"{MARKER}\n## report"
QUOTED = f"> you wrote:\n> {MARKER}\n> ## report"


def comment(cid: int, body: str = FIRST_LINE, created: str = OLD, user_type: str = "Bot") -> dict:
    return {"id": cid, "body": body, "created_at": created, "user": {"type": user_type}}


def pick(*comments: dict) -> int:
    """The chosen id, checked to be independent of the listing order."""
    forward = select_sticky_comment(list(comments))
    backward = select_sticky_comment(list(reversed(comments)))
    assert forward is not None and forward is backward
    return forward["id"]


# -- one key at a time ------------------------------------------------------------------


def test_first_line_marker_beats_a_quoted_one():
    assert pick(comment(1, FIRST_LINE), comment(2, QUOTED)) == 1


def test_bot_beats_person():
    assert pick(comment(1, user_type="Bot"), comment(2, user_type="User")) == 1


def test_newer_beats_older():
    assert pick(comment(1, created=NEW), comment(2, created=OLD)) == 1


def test_higher_id_breaks_a_tie_numerically():
    assert pick(comment(9), comment(10)) == 10  # not "9" > "10"
    assert pick(comment(9), {**comment(10), "id": "10"}) == "10"


# -- precedence between keys ---------------------------------------------------------------


def test_first_line_outranks_author_recency_and_id():
    quoted_but_otherwise_better = comment(9, QUOTED, created=NEW, user_type="Bot")
    assert (
        pick(comment(1, FIRST_LINE, created=OLD, user_type="User"), quoted_but_otherwise_better)
        == 1
    )


def test_author_outranks_recency_and_id():
    assert (
        pick(comment(1, created=OLD, user_type="Bot"), comment(9, created=NEW, user_type="User"))
        == 1
    )


def test_recency_outranks_id():
    assert pick(comment(1, created=NEW), comment(9, created=OLD)) == 1


# -- odd payloads ----------------------------------------------------------------------------


def test_missing_or_odd_fields_do_not_break_selection():
    no_user = {"id": 1, "body": FIRST_LINE, "created_at": OLD, "user": None}
    no_date = {"id": 2, "body": FIRST_LINE, "user": {"type": "User"}}
    bad_id = {**comment(3, user_type="User"), "id": "n/a"}
    assert pick(no_user, no_date) == 1  # same rank, neither a bot: the dated one is newer
    assert pick(no_date, bad_id) == "n/a"  # dated beats undated; a bad id only loses ties
    assert select_sticky_comment([{"id": 4, "body": None}, {"id": 5}]) is None


@pytest.mark.parametrize(
    ("body", "rank"),
    [
        (f"{MARKER}\nreport", 2),
        (f"{MARKER} trailing text\nreport", 2),
        (f"\n\n   {MARKER}\nreport", 2),
        (f"intro {MARKER}\nreport", 1),
        (f"intro\n{MARKER}", 1),
        (MARKER[:-1], 0),
        ("", 0),
    ],
)
def test_marker_rank(body, rank):
    assert marker_rank(body) == rank


def test_an_unreadable_id_only_loses_ties():
    assert pick({**comment(0), "id": "n/a"}, comment(1)) == 1
    assert pick({**comment(0), "id": None}, comment(1)) == 1

