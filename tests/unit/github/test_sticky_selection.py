"""Which sticky comment is ours, which copy is kept and whose report it holds: the pure
rules of observer_ci.github.sticky (no network).

The rule (module docstring of observer_ci.github.sticky): a comment is a copy when its FIRST line
is our marker for the key and our identity wrote it; the oldest copy (lowest id) is kept;
it holds the newest report, by ``(run, attempt)`` then id, and ours unless a newer run's is
there. Each key is tested where it alone decides: the cases tie on every other key.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer_ci.core.constants import MARKER
from observer_ci.github.sticky import (
    StickyMarker,
    comment_login,
    is_ours,
    marker_for,
    newer_report,
    our_copies,
    parse_marker,
    select_sticky_comment,
    valid_comment_key,
    with_marker,
)

BOT = "github-actions[bot]"


def line(key: str = "default", run: int = 0, attempt: int = 0) -> str:
    return StickyMarker(key, "", run, attempt).render()


def comment(cid: int, body: str, login: str = BOT) -> dict:
    kind = "Bot" if login.endswith("[bot]") else "User"
    return {"id": cid, "body": body, "user": {"login": login, "type": kind}}


def ids(comments: list[dict]) -> list[int]:
    return [c["id"] for c in comments]


# -- where the marker is: the first line, never a quote -------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        f"{line('k')}\nreport",
        f"{line('k')}",
        f"\n\n   {line('k')}\r\nreport",  # blank lines and CRLF line ends (web edits)
        f"{line('k')} trailing text\nreport",
    ],
)
def test_a_marker_on_the_first_line_is_read(body: str) -> None:
    assert parse_marker(body) == StickyMarker("k")


@pytest.mark.parametrize(
    "body",
    [
        f"> {line('k')}\n> report",  # a reply quoting our comment
        f">{line('k')}",
        f"Thanks!\n\n> {line('k')}\n> report",
        f"see the report:\n{line('k')}",  # second line
        f"`{line('k')}`",
        line("k").replace("-->", ""),  # not closed
        line("k").upper(),
        "",
    ],
)
def test_a_marker_anywhere_else_is_not_read(body: str) -> None:
    assert parse_marker(body) is None


def test_marker_fields_are_read_by_name_and_unknown_ones_ignored() -> None:
    body = "<!-- observer-ci:sticky-comment attempt=3 future=x key=gpu run=41 -->\nr"
    assert parse_marker(body) == StickyMarker("gpu", "", 41, 3)
    assert parse_marker(f"{MARKER}\nold release") == StickyMarker("default", "", 0, 0)
    unreadable = "<!-- observer-ci:sticky-comment key= run=x attempt=-1 -->"
    assert parse_marker(unreadable) == StickyMarker("default", "", 0, -1)


def test_the_first_line_decides_when_owner_key_and_age_tie() -> None:
    # the quoted copy is older, ours, same key: only the marker's place tells them apart
    quoted = comment(1, f"> {line()}\n> old report")
    second_line = comment(2, f"note\n{line()}")
    marked = comment(3, f"{line()}\nreport")
    assert select_sticky_comment([quoted, second_line, marked])["id"] == 3
    assert select_sticky_comment([quoted, second_line]) is None
    assert ids(our_copies([marked, second_line, quoted], "default", None)) == [3]


# -- whose comment ----------------------------------------------------------------------------


def test_ownership_decides_when_marker_key_and_age_tie() -> None:
    person = comment(1, f"{line()}\npasted report", login="octocat")
    other_app = comment(2, f"{line()}\nx", login="other-app[bot]")
    ours = comment(3, f"{line()}\ny")
    # identity unknown (an App token): any Bot is ours, never a person
    assert select_sticky_comment([person, ours]) == ours
    assert select_sticky_comment([person]) is None
    # identity known (GET /user or the login of the comment we created): only that login
    assert select_sticky_comment([person, other_app, ours], identity=BOT) == ours
    assert select_sticky_comment([other_app, ours], identity="octocat") is None
    assert select_sticky_comment([person, ours], identity="octocat") == person


@pytest.mark.parametrize(
    ("user", "identity", "ours"),
    [
        ({"login": BOT, "type": "Bot"}, None, True),
        ({"login": "octocat", "type": "User"}, None, False),
        ({"login": "octocat", "type": "User"}, "octocat", True),
        ({"login": "OctoCat", "type": "User"}, "octocat", True),  # logins ignore case
        ({"login": BOT, "type": "Bot"}, "octocat", False),
        ({"login": "octocat[bot]", "type": "Bot"}, "octocat", False),  # exact login only
        ({"type": "Bot"}, "", True),  # an empty identity is an unknown one
        ({"login": "", "type": "User"}, "", False),
        (None, None, False),  # deleted account ("ghost")
        ("github-actions[bot]", None, False),
    ],
)
def test_is_ours(user: object, identity: str | None, ours: bool) -> None:
    assert is_ours({"id": 1, "body": line(), "user": user}, identity) is ours


# -- which key ----------------------------------------------------------------------------------


def test_the_key_decides_when_marker_owner_and_age_tie() -> None:
    cpu = comment(1, f"{line('cpu')}\nr")
    cpu_311 = comment(2, f"{line('cpu-3.11')}\nr")
    gpu = comment(3, f"{line('gpu')}\nr")
    bare = comment(4, f"{MARKER}\nolder release")
    everything = [cpu, cpu_311, gpu, bare]
    assert select_sticky_comment(everything, "gpu") == gpu
    assert select_sticky_comment(everything, "cpu-3.11") == cpu_311  # exact, not a prefix
    assert select_sticky_comment(everything, "cpu") == cpu
    assert select_sticky_comment(everything, "default") == bare  # the bare marker's key
    assert select_sticky_comment(everything) == bare
    assert select_sticky_comment(everything, "cpu-3") is None


# -- which copy is kept: the oldest ---------------------------------------------------------------


def test_age_decides_when_marker_owner_and_key_tie() -> None:
    copies = [comment(cid, f"{line()}\nv{cid}") for cid in (10, 9, 11, 100)]
    for order in (copies, copies[::-1], random.Random(1).sample(copies, 4)):
        assert select_sticky_comment(order)["id"] == 9  # by number, not as text ("100" < "9")
        assert ids(our_copies(order, "default", None)) == [9, 10, 11, 100]


def test_the_kept_copy_is_the_oldest_even_when_a_younger_one_holds_a_newer_run() -> None:
    old = comment(3, f"{line(run=1, attempt=1)}\nold")
    young = comment(5, f"{line(run=9, attempt=1)}\nnew")
    assert select_sticky_comment([young, old]) == old


# -- whose report the kept copy holds ------------------------------------------------------------


def _ours(run: int, attempt: int = 1) -> StickyMarker:
    return StickyMarker("default", "", run, attempt)


def test_the_run_decides_before_the_attempt_and_the_id() -> None:
    run_5 = comment(1, f"{line(run=5, attempt=1)}\nrun 5")
    run_4_attempt_9 = comment(2, f"{line(run=4, attempt=9)}\nrun 4")
    assert newer_report([run_5, run_4_attempt_9], _ours(3)) == run_5
    assert newer_report([run_4_attempt_9, run_5], _ours(4, 9)) == run_5


def test_the_attempt_decides_when_the_run_ties() -> None:
    attempt_2 = comment(1, f"{line(run=5, attempt=2)}\nattempt 2")
    attempt_1 = comment(2, f"{line(run=5, attempt=1)}\nattempt 1")
    assert newer_report([attempt_2, attempt_1], _ours(4)) == attempt_2
    assert newer_report([attempt_2, attempt_1], _ours(5, 1)) == attempt_2


def test_the_id_decides_when_run_and_attempt_tie() -> None:
    first = comment(1, f"{line(run=5, attempt=1)}\nwritten first")
    last = comment(2, f"{line(run=5, attempt=1)}\nwritten last")
    assert newer_report([first, last], _ours(4)) == last
    assert newer_report([last, first], _ours(4)) == last


@pytest.mark.parametrize(
    ("copy_line", "ours", "newer"),
    [
        (line(run=5, attempt=1), _ours(5, 1), False),  # the same run posting again
        (line(run=5, attempt=1), _ours(5, 2), False),  # a re-run
        (line(run=5, attempt=1), _ours(6, 1), False),
        (line(run=5, attempt=2), _ours(5, 1), True),
        (line(run=6, attempt=1), _ours(5, 9), True),
        (MARKER, _ours(1, 0), False),  # an older release's report: no run, older than any
        (MARKER, StickyMarker(), False),  # no run on either side: ours replaces it
        (line(run=1, attempt=0), StickyMarker(), True),  # a run without a run id loses
    ],
)
def test_only_a_strictly_newer_run_is_kept_over_ours(
    copy_line: str, ours: StickyMarker, newer: bool
) -> None:
    copy = comment(7, f"{copy_line}\nreport")
    assert newer_report([copy], ours) == (copy if newer else None)


def test_no_copies_hold_no_newer_report() -> None:
    assert newer_report([], _ours(1)) is None


# -- the marker line of a posted body ------------------------------------------------------------


def test_with_marker_replaces_only_a_leading_marker() -> None:
    new = _ours(8, 2)
    assert with_marker(f"{line(run=3)}\n# Report", new) == f"{new.render()}\n# Report"
    assert with_marker(f"\n\n{MARKER}\n# Report", new) == f"{new.render()}\n# Report"
    assert with_marker(MARKER, new) == f"{new.render()}\n"
    assert with_marker(f"{MARKER}\n\n", new) == f"{new.render()}\n\n"  # kept as posted
    quoted = f"> {MARKER}\n# Report"  # not a marker line: kept as text
    assert with_marker(quoted, new) == f"{new.render()}\n{quoted}"
    assert parse_marker(with_marker(quoted, new)) == new


# -- for all lists of comments: the selection equals the rule stated directly --------------------

_PLACES = ("first line", "quoted", "second line", "none")
_comment_spec = st.tuples(
    st.sampled_from((BOT, "other[bot]", "octocat")),  # author
    st.sampled_from(_PLACES),  # where the marker is
    st.sampled_from(("a", "b", "a-1")),  # its key
)


def _body(place: str, key: str) -> str:
    return {
        "first line": f"{line(key)}\nreport",
        "quoted": f"> {line(key)}\n> report",
        "second line": f"hello\n{line(key)}",
        "none": f"no marker {key}",
    }[place]


@given(
    specs=st.lists(_comment_spec, max_size=8),
    id_seed=st.integers(0, 2**16),
    identity=st.sampled_from((None, BOT, "octocat")),
)
def test_selection_is_the_oldest_first_line_copy_of_the_key_by_us(
    specs: list[tuple[str, str, str]], id_seed: int, identity: str | None
) -> None:
    numbers = random.Random(id_seed).sample(range(1, 10_000), len(specs))  # listed unordered
    comments = [
        comment(n, _body(place, key), login) for n, (login, place, key) in zip(numbers, specs)
    ]

    def ours(login: str) -> bool:
        return login == identity if identity else login.endswith("[bot]")

    expected = sorted(
        n
        for n, (login, place, key) in zip(numbers, specs)
        if place == "first line" and key == "a" and ours(login)
    )
    assert ids(our_copies(comments, "a", identity)) == expected
    chosen = select_sticky_comment(comments, "a", identity)
    assert (chosen["id"] if chosen else None) == (expected[0] if expected else None)


def test_marker_for_a_key_without_a_run() -> None:
    assert marker_for() == "<!-- observer-ci:sticky-comment key=default -->"
    assert marker_for("") == marker_for("default")
    assert marker_for("cpu") == "<!-- observer-ci:sticky-comment key=cpu -->"


@pytest.mark.parametrize(
    ("comment", "login"),
    [
        ({"user": {"login": "octocat", "type": "User"}}, "octocat"),
        ({"user": {"login": None, "type": "Bot"}}, ""),
        ({"user": {"type": "Bot"}}, ""),
        ({"user": "octocat"}, ""),
        ({"user": None}, ""),
        ({}, ""),
    ],
)
def test_comment_login(comment: dict, login: str) -> None:
    assert comment_login(comment) == login


@pytest.mark.parametrize(("key", "valid"), [("", "default"), ("  ", "default"), (" cpu ", "cpu")])
def test_a_blank_comment_key_is_the_default_one(key: str, valid: str) -> None:
    assert valid_comment_key(key) == valid


def test_a_comment_key_that_could_break_the_marker_is_refused_with_the_rule() -> None:
    with pytest.raises(ValueError) as info:
        valid_comment_key("a -->")
    assert str(info.value) == (
        "comment key must be 1-64 letters, digits, '.', '_' or '-' "
        "(starting with a letter or digit), got 'a -->'"
    )
