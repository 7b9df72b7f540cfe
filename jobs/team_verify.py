"""``lb teams verify``: recompute every team board from the member boards and the membership.

The team structures are a function of the membership hash and the boards
(:func:`domain.teams.team_boards`); this reads both, computes that function
and compares it with the stored team boards, members sets and sums. It
never writes. The reads of one game are not one instant: beside a busy job,
run it again before trusting a difference (an equal answer is exact).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from adapters.redis import RedisClient, text
from domain.errors import QueryError
from domain.games import GameCatalog
from domain.teams import TeamAggregate, TeamKeys, team_boards
from readers.teams import scored


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _scores(client: RedisClient, keys: TeamKeys) -> dict[str, dict[str, int]]:
    """Window id -> player -> score, decoded from every board that has team state."""
    out: dict[str, dict[str, int]] = {}
    for window, slots in _hash(client, keys.slots).items():
        size = int(slots)
        rows = scored(client.zrange(f"{keys.prefix}{window}", 0, -1, withscores=True))
        out[window] = {p: int(c) // size for p, c in rows}
    return out


def _stored_members(client: RedisClient, keys: TeamKeys) -> dict[tuple[str, str], dict[str, int]]:
    out: dict[tuple[str, str], dict[str, int]] = {}
    start = len(f"{keys.prefix}team:")
    for key in client.scan_iter(match=f"{keys.prefix}team:*", count=1000):
        name = text(key)[start:]
        window, _, team = name.rpartition(":")
        rows = scored(client.zrange(key, 0, -1, withscores=True))
        out[(window, team)] = {p: int(s) for p, s in rows}
    return out


def _hash(client: RedisClient, key: str) -> dict[str, str]:
    raw: Any = client.hgetall(key)
    return {text(name): text(value) for name, value in raw.items()}


def _dense_differences(
    client: RedisClient, keys: TeamKeys, window: str, board: Mapping[str, float]
) -> list[str]:
    """A ``dense_ranks`` game's distinct-score counts of one team board against that board."""
    want = Counter(board.values())
    counts = _hash(client, keys.dense_counts(window))
    counted = int(counts.pop("#", "0"))
    have = {float(value): int(n) for value, n in counts.items()}
    present = {
        score
        for _, score in scored(client.zrange(keys.dense_values(window), 0, -1, withscores=True))
    }
    out: list[str] = []
    if have != dict(want) or present != set(want):
        wrong = sorted(v for v in set(have) | set(want) if have.get(v) != want.get(v))[:3]
        out.append(
            f"dense counts {window}: {len(have)} distinct values stored, {len(want)} on the "
            f"team board, {len(present)} in the value set (values off: {wrong})"
        )
    if counted != len(board):
        out.append(f"dense counts {window}: {counted} teams counted, {len(board)} on the board")
    return out


def verify_game(
    client: RedisClient, keys: TeamKeys, kind: TeamAggregate, *, dense: bool = False
) -> list[str]:
    """Differences between one game's stored team state and the recomputed one.

    ``dense``: the game keeps distinct-score counts, compared with its team boards too.
    """
    membership = _hash(client, keys.membership)
    scores = _scores(client, keys)
    boards, members = team_boards(kind, membership, scores)
    out: list[str] = []
    stored = _stored_members(client, keys)
    for where in sorted(set(members) | set(stored)):
        want, have = members.get(where, {}), stored.get(where, {})
        if want != have:
            extra = sorted(set(have) - set(want))[:3]
            missing = sorted(set(want) - set(have))[:3]
            out.append(
                f"members {where[0]} {where[1]}: {len(have)} stored, {len(want)} expected "
                f"(extra {extra}, missing {missing}, other values differ otherwise)"
            )
    for window in sorted(set(boards) | set(scores)):
        want_board = boards.get(window, {})
        have_board = dict(scored(client.zrange(keys.board(window), 0, -1, withscores=True)))
        sums = {t: int(s) for t, s in _hash(client, keys.sums(window)).items()}
        for team in sorted(set(want_board) | set(have_board)):
            wanted, stored_score = want_board.get(team), have_board.get(team)
            if wanted is None or stored_score is None or not _close(wanted, stored_score):
                out.append(f"team board {window} {team}: stored {stored_score}, expected {wanted}")
            expected_sum = sum(members.get((window, team), {}).values())
            if wanted is not None and sums.get(team) != expected_sum:
                out.append(f"sum {window} {team}: stored {sums.get(team)}, expected {expected_sum}")
        if dense:
            out += _dense_differences(client, keys, window, have_board)
    return out


def verify_teams(
    client: RedisClient, catalog: GameCatalog, namespace: str, game: str | None = None
) -> dict[str, Any]:
    """``{"equal": bool, "games": {game: [difference, ...]}}`` over every team game (or one)."""
    games: Mapping[str, Any] = catalog.team_games()
    if game is not None:
        if game not in games:
            named = ", ".join(sorted(games)) or "none"
            raise QueryError(f"game {game!r} keeps no team boards (games with teams: {named})")
        games = {game: games[game]}
    report = {
        g: verify_game(client, TeamKeys(namespace, g), config.teams, dense=config.dense_ranks)
        for g, config in games.items()
    }
    return {"equal": not any(report.values()), "games": report}
