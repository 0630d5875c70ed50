"""User acceptance (completion/stats.py): each suggestion counts once, in its latest state, and
the figures are apart from draft-token acceptance."""
from __future__ import annotations

from completion.stats import PipelineStats, UserAcceptance


def test_each_suggestion_counts_once_in_its_latest_state():
    u = UserAcceptance()
    whole, part, dropped, unseen = (u.offer(n) for n in (10, 8, 5, 4))
    for sid in (whole, part, dropped, whole):
        assert u.on_shown(sid)
    assert u.summary()["displayed"] == 3 and u.summary()["pending"] == 3
    assert u.on_accepted(whole, 0, full=True)
    assert u.on_accepted(part, 3, full=False)
    assert u.on_accepted(part, 2, full=False)     # less than before: nothing changes
    assert u.on_dismissed(part)                   # the rest went: still accepted in part
    assert u.on_dismissed(dropped)
    s = u.summary()
    assert (s["displayed"], s["acceptedFully"], s["acceptedPartly"], s["dismissed"], s["pending"]) == (3, 1, 1, 1, 0)
    assert (s["displayedChars"], s["acceptedChars"], s["userAcceptanceRate"]) == (23, 13, round(2 / 3, 4))
    # Accepting the rest makes it whole; an accept never reported shown counts as shown.
    u.on_accepted(part, 8, full=False)
    u.on_accepted(unseen, 99, full=False)         # clamped to its length: a full accept
    s = u.summary()
    assert (s["displayed"], s["acceptedFully"], s["acceptedPartly"], s["acceptedChars"]) == (4, 3, 0, 22)
    assert not u.on_shown(12345) and u.summary()["unknownReports"] == 1


def test_old_suggestions_are_forgotten_and_nothing_is_named_like_draft_acceptance():
    u = UserAcceptance(max_offers=2)
    first = u.offer(3)
    u.offer(3)
    u.offer(3)
    assert not u.on_shown(first)
    assert not set(u.summary()) & set(PipelineStats().summary())
