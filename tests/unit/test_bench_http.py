"""bench.http's reading of what subscribers received (pure functions, no services)."""

from __future__ import annotations

import pytest

from bench.http import leader_score, probe_deliveries

SENT = {101: 1.0, 102: 1.1, 103: 1.2}


@pytest.mark.parametrize(
    ("pages", "seen"),
    [
        # every probe's own page
        ([(101, 1.05), (102, 1.15), (103, 1.25)], [(101, 1.05), (102, 1.15), (103, 1.25)]),
        # 102's page was skipped: 102 counts when 103's page shows it (103 outranks it)
        ([(101, 1.05), (103, 1.4)], [(101, 1.05), (102, 1.4), (103, 1.4)]),
        # the subscriber saw nothing after 101: 102 and 103 are not deliveries
        ([(101, 1.05)], [(101, 1.05)]),
        ([], []),
    ],
)
def test_a_skipped_probe_counts_at_the_page_that_caught_up(
    pages: list[tuple[int, float]], seen: list[tuple[int, float]]
) -> None:
    assert probe_deliveries(SENT, [pages]) == seen
    assert probe_deliveries(SENT, [pages, pages]) == seen + seen


def test_the_leader_is_read_from_a_top_message_only() -> None:
    page = (
        b'{"type":"top","id":"1-0","window":"alltime","entries":[{"rank":1,"playerId":"p",'
        b'"score":42},{"rank":2,"playerId":"q","score":7}],"changes":[]}'
    )
    assert leader_score(page) == 42
    assert leader_score(b'{"type":"top","id":"1-0","window":"alltime","entries":[]}') is None
    assert leader_score(b'{"type":"rank","id":"1-0","score":42}') is None
