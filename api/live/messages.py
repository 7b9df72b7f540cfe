"""What the live pushes carry: a stream entry's changes in, JSON messages out.

The job writes each board change to the change stream as a compact JSON list
(field ``c``; :mod:`sinks.boards`); :func:`parse_entry` reads it back
as :class:`StreamChange` tuples. Messages go out as :class:`Outgoing`: the
JSON text, and the WebSocket frame made from it once, however many
subscribers are sent the same message (:mod:`api.ws_frames`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from api.ws_frames import text_frame
from domain.errors import QueryError


class StreamChange(NamedTuple):
    """One member's change as the job wrote it (scores decoded; None = not on the board).

    A tuple, not a dataclass: the hub makes one for every change of every
    entry (thousands a second, most of them never pushed), and a tuple is
    made and hashed in C.
    """

    window: str
    #: The player (a team on a game's team change stream).
    player: str
    #: Scores are integers; a team's ``avg`` aggregate is a float.
    old: int | float | None
    new: int | float | None
    #: The metadata of the event that set ``new`` (None: it carried none).
    metadata: str | None = None

    def wire(self, rank: int | None) -> dict[str, Any]:
        """As pushed: ``rank`` is the player's rank on the page sent with it (None: not on it).

        ``metadata`` is there only when the event that set ``new`` carried some.
        """
        out: dict[str, Any] = {
            "playerId": self.player,
            "old": self.old,
            "new": self.new,
            "rank": rank,
        }
        if self.metadata is not None:
            out["metadata"] = self.metadata
        return out


def parse_entry(fields: Mapping[Any, Any]) -> list[StreamChange]:
    """The changes of one stream entry (field ``c``: a JSON list written by the job)."""
    raw = fields.get(b"c", fields.get("c", b"[]"))
    return [
        StreamChange(
            c["w"],
            c["p"],
            _number(c["o"]) if c["o"] else None,
            _number(c["n"]) if c["n"] else None,
            c.get("m"),
        )
        for c in json.loads(raw)
    ]


def _number(text: str) -> int | float:
    """A score as written to a stream: decimal text, or a float for an ``avg`` team."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def stream_id(text: str) -> tuple[int, int]:
    """A stream id (``ms-seq``) as a comparable pair; QueryError if it is not one."""
    ms, _, seq = text.partition("-")
    if not (ms.isdigit() and seq.isdigit()) or len(text) > 41:
        raise QueryError(f"not a stream position: {text[:60]!r}")
    return int(ms), int(seq)


class Outgoing:
    """One message as sent: its JSON text, and its WebSocket frame once one is asked for.

    A page pushed to every subscriber of a watch is one ``Outgoing``, so its
    frame is serialised once, not once per subscriber (:mod:`api.ws_frames`).
    """

    __slots__ = ("_frame", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._frame: bytes | None = None

    @property
    def frame(self) -> bytes:
        if self._frame is None:
            self._frame = text_frame(self.text)
        return self._frame


def compact(document: Mapping[str, Any]) -> str:
    """A message document as sent: compact JSON."""
    return json.dumps(document, separators=(",", ":"))


def outgoing(kind: str, position: str, body: Mapping[str, Any]) -> Outgoing:
    """One message: its type, its position, then the body, as JSON."""
    return Outgoing(compact({"type": kind, "id": position, **body}))


def top_document(
    position: str,
    page: Mapping[str, Any],
    ranks: Mapping[str, int | None],
    changes: list[StreamChange],
) -> dict[str, Any]:
    """The ``top`` message: the page as ``GET .../top`` answers it, and the changes behind it.

    Each change carries the player's rank on this page (None: not on it).
    """
    return {
        "type": "top",
        "id": position,
        **page,
        "changes": [c.wire(ranks.get(c.player)) for c in changes],
    }


#: ``send(type, id, message)``: deliver one message (its JSON text includes the
#: ``id``, the stream position it reflects; the type and id again for SSE framing).
Send = Callable[[str, str, Outgoing], Awaitable[None]]
#: ``write_now(message)``: write one message at once if the connection takes it
#: without waiting; False (nothing written) otherwise; OSError once it is closing.
WriteNow = Callable[[Outgoing], bool]
